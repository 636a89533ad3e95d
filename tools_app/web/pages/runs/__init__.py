"""The debugger's pages: the runs list (`run_list`), a run's page and its actions (rerun,
cancel, approvals, breakpoints, export: `run_page`), compare, the fork editor,
re-executing a call and splicing its result (`reexecution`), and the navigation's
"Waiting for you" count and its poll (`waiting`)."""
