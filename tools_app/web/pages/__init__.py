"""The HTML pages, one sub-package per job: `runs/` (the runs list, a run's page and its
actions, compare, fork, re-execution, "Waiting for you"), `audit/` (the calls list, the
tool pages and their Try it), `registry/` (tools, MCP servers, endpoints and their
capability probe). The playground and the test suites are one module each; `access`,
`charts`, `forms` and the `timeline` template tags are shared. htmx partials are
rendered by the same views."""
