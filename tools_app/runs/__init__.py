"""Runs: starting them, recording them, executing them and debugging them.

`services` starts and cancels runs, `tasks` are the task interfaces a worker executes and
`sweeps` the recovery every kind of worker runs. Below them, by job: `debugger/` (rerun,
replay, fork, run files, compare, re-execution, approvals, breakpoints, try-it, the
timeline's read model), `worker/` (claim, drive and record one run), `snapshot/` (what a
run freezes at its start and the engine rebuilt from it), `loops/` (the process's event
loops, database lanes and task backends) and `store/` (the run's record: status moves,
leases, the event log, reads, and the SQL of the write path). Imports point down that
list only (import-linter checks it); nothing here imports the live or web layers."""
