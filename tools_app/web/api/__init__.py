"""The JSON API under `/api/`, on django-ninja: one router per resource (runs, decisions,
re-executions, calls, tools), assembled with its auth, errors and docs in app.py."""
