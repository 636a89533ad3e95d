"""Tool-call test suites: named sets of cases (a starting conversation, the tools
offered, assertions on what the model does with them) run on a matrix of endpoints,
each cell repeated, each execution an ordinary run. `assertions` (the typed assertions
and their sentences; `argument_checks`, what an arguments assertion checks), `files`
(suites as YAML or JSON files), `services` (suites and cases written, a case saved from
a run), `runner` (a suite run started and advanced), `evaluation` (a finished run
checked), `matrix` (what the results page and the API show), `junit` (run_suite's JUnit
XML), `history` (each endpoint's pass rate per suite run), `tasks` (the task that
drives a suite run) and `recovery` (suite runs whose driver was lost, picked up by the
runs' sweeps). It sits above `runs` (it starts runs through `runs.services`) and below
`web`."""
