"""The run's record: the one owner of status moves (`lifecycle`), leases and their
fencing (`leases`), the numbered event log (`eventlog`), reads for pages, sockets and the
API (`selectors`), retention, what makes untrusted values safe to store (`sanitize`),
long-lived connections' care (`db`) and living through an outage (`outage`), the
db_workers' heartbeat rows (`worker_beats`), PostgreSQL's statistics kept current as the
run tables first grow (`planner_stats`), and the write path's SQL built once and run
with parameters (`sql/`). Imports nothing else from `runs/`."""
