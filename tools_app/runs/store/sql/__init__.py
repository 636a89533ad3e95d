"""The write path's SQL: the recorder's statements built once per shape and run with
parameters (`rowsql`, values prepared and executed by `rowsql_driver`), a batch's row
changes folded into few of them (`row_changes`), and the hot reads compiled once by the
ORM and run again with new parameters (`prepared`). `rowsql_orm` and `prepared_orm` are
the same functions on the ORM's public API, the reference their tests compare against;
`write_path` holds the `Add`/`In` markers both take and the `AGENTFORGE_WRITE_PATH`
switch between them (read once, at import). Imports only `store.sanitize` from `runs/`."""
