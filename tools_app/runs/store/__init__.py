"""The run's record: the one owner of status moves (`lifecycle`), leases and their
fencing (`leases`), the numbered event log (`eventlog`), reads for pages, sockets and the
API (`selectors`), retention, what makes untrusted values safe to store (`sanitize`),
and the write path's SQL built once and run with parameters (`rowsql`, `rowsql_driver`,
`prepared`, `row_changes`, `db`). Imports nothing else from `runs/`."""
