"""The model <-> tools loop: the ToolService registry and its configuration
(`service`), one chat() call (`chat_run`), executing the calls (`invocation`), what
the loop takes and gives (`contract`), where it stops for a person (`gates`,
`callbacks`), loop health (`health`, `round_health`) and what it spends (`spending`)."""
