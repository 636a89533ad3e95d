# Two commands: `make run` (serve the app on the embedded default) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
HOST ?= 127.0.0.1
STAMP := $(VENV)/.installed
# The Makefile is the development entry: DEBUG on (and with it the dev SECRET_KEY) for
# everything it starts, unless the environment says otherwise. The settings default to
# DEBUG off, so any other start (daphne, manage.py, a service unit) needs a SECRET_KEY.
export DEBUG ?= 1

.PHONY: run test install migrate seed assets lint typecheck check bench bench-audit soak clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || "$$(.ci/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP) assets

assets:
	@.ci/vendor-assets

migrate: install
	$(PY) manage.py migrate --noinput

seed: migrate
	$(PY) manage.py seed_demo

# daphne's -b/-p listen with Twisted's backlog of 50 connections waiting to be accepted:
# past that a burst's connections are dropped and retried a second later. An endpoint
# string sets it (the kernel caps it at net.core.somaxconn).
BACKLOG ?= 1024

run: seed
	$(PY) manage.py first_login_hint
	$(VENV)/bin/daphne -e tcp:port=$(PORT):interface=$(HOST):backlog=$(BACKLOG) \
		agentforge_web.asgi:application

test: install
	$(PY) manage.py check --fail-level WARNING
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -m "not scaleout"
	DATABASE_URL="$${AGENTFORGE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}" \
	REDIS_URL="$${AGENTFORGE_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}" \
	$(PY) -m pytest -m "scaleout or both" -p no:cacheprovider

lint:
	$(VENV)/bin/ruff check .

typecheck:
	$(VENV)/bin/mypy

bench: install
	$(PY) -m benchmarks.run_all

# The audit log at 100,000 runs / 1,000,000 calls (SQLite and PostgreSQL): about an hour.
bench-audit: install
	$(PY) -m benchmarks.audit_scale

# daphne's memory under steady use (docs/benchmarks/soak.md): MINUTES of runs, 60 a minute.
MINUTES ?= 30
soak: install
	$(PY) -m benchmarks.soak --minutes $(MINUTES)

clean:
	rm -rf $(VENV) staticfiles static/vendor
