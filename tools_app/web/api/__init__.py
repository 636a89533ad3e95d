"""The JSON API under `/api/`, on django-ninja: one router per resource (runs, decisions,
re-executions, calls, tools and Try it, the registry, suites), assembled with its auth,
errors and docs in app.py; the API tokens (`tokens`), a run's event stream and long poll
(`event_stream`), and the views of OTLP in (`otlp`) and of the recording proxy (`proxy`)."""
