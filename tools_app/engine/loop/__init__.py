"""The model <-> tools loop: the ToolService registry and its configuration
(`service`), one chat() call (`chat_run`), executing the calls (`invocation`), what
the loop takes and gives (`contract`) and where it stops for a person (`gates`,
`callbacks`)."""
