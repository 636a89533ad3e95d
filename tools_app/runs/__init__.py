"""Runs: starting them (services), reading them (selectors), freezing what they use
(snapshot), the one owner of their status moves (lifecycle), crash safety (leases), the
per-run event log (eventlog), recording engine events (recorder), executing them
(runner, tasks, the in-process task backend, the worker loop). Never imports the live or
web layers: viewers hear of new events through `eventlog.run_event_committed`."""
