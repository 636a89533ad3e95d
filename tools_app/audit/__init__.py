"""The audit log: finding runs and tool calls across every run (`run_filters`,
`call_filters`, full-text `search` over `search_index`), the calls and tool pages' reads
(`selectors`, `tool_stats`; sorts in `call_sorts`), the lists' totals bounded in time
(`call_totals`, `run_totals`, `deadline`), the tools index's figures (`tools_overview`),
cost sums (`costs`) and the columns database triggers keep for them (`triggers`). Reads
stored rows only: imports nothing from `runs/`, `live/` or `web/`."""
