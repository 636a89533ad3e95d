"""Django settings, read from the environment (see README: Configuration).

Defaults are the embedded, one-command configuration: SQLite in WAL mode, the in-memory
channel layer and the in-process task backend. The scale-out configuration is the same
code with DATABASE_URL, REDIS_URL and TASK_BACKEND=database set.
"""

from __future__ import annotations

import ipaddress
import os
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from .channel_layers import BACKENDS as CHANNEL_LAYER_BACKENDS
from .channel_layers import redis_channel_layers
from .env import envbool, envfloat, envint, envlist, envsecret, envstr

# Django's generic classes (ModelAdmin, ModelForm...) accept a type argument at run time
# as they do in the type stubs: the admin subclasses ModelAdmin[Run].
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(envstr("DATA_DIR", str(BASE_DIR / "data")))

# Off unless asked for: the technical error pages, the dev SECRET_KEY and loopback model
# servers are for development only. `make run`, the test suite and the type checker turn
# it on (the Makefile; agentforge_web/settings_dev.py); any other start needs a SECRET_KEY.
DEBUG = envbool("DEBUG", False)

_secret = envsecret("SECRET_KEY")
if not _secret:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off (DEBUG is off unless DEBUG=1; "
            "`make run` turns it on for development)")
    _secret = "dev-only-insecure-key-do-not-use-in-production"  # noqa: S105
SECRET_KEY = _secret

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
if not DEBUG and "*" in ALLOWED_HOSTS:
    # The WebSocket origin check is only as strict as ALLOWED_HOSTS: "*" would let any
    # site open a socket with the user's cookies (cross-site WebSocket hijacking).
    raise ImproperlyConfigured('ALLOWED_HOSTS must not contain "*" when DEBUG is off')
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "ninja",  # the API docs page: its template and Swagger UI assets, as static files
    "axes",
    "django_ratelimit",
    "tools_app",  # before django_tasks_db: its db_worker command adds the run reaper
    "django_tasks_db",
]

MIDDLEWARE = [
    # First: a request that finds the database unavailable gets a 503, never a bare 500,
    # wherever below it failed (agentforge_web/middleware.py).
    "agentforge_web.middleware.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: turns a locked-out login into its 429 answer.
    "axes.middleware.AxesMiddleware",
]

# Login throttling (django-axes): after AGENTFORGE_LOGIN_FAILURE_LIMIT failed logins for
# one username from one address, further attempts of that pair are refused (429) until
# AGENTFORGE_LOGIN_COOLOFF_MINUTES have passed; a successful login resets the count.
# The pair, not either alone: a stranger guessing elsewhere cannot lock a known account
# out. `manage.py axes_reset` unlocks at once. The address is the connection's
# (REMOTE_ADDR): behind a reverse proxy, every client's is the proxy's (README).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("AGENTFORGE_LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(
    minutes=envint("AGENTFORGE_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False  # no start-up banner in every command; lockouts are still logged

ROOT_URLCONF = "agentforge_web.urls"
ASGI_APPLICATION = "agentforge_web.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
            ],
            "libraries": {"timeline": "tools_app.web.pages.timeline_tags",
                          "waiting": "tools_app.web.pages.runs.waiting"},
        },
    },
]

# -- database ---------------------------------------------------------------------------
DATABASE_URL = envstr("DATABASE_URL", f"sqlite:///{DATA_DIR / 'agentforge.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Persistent connections: every thread that uses the database lives on (the HTTP
    # requests' kept threads, agentforge_web/handler.py; a worker's database lanes; the
    # live timeline's reads), and opening SQLite again (its set-up, the schema parsed)
    # is a large share of a request's CPU. A connection that failed is still replaced
    # (Django's rule at each request's start and end; runs.store.db for the other threads).
    DATABASES["default"]["CONN_MAX_AGE"] = None
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = {
        # WAL lets the timeline read while a run writes; IMMEDIATE avoids the
        # "database is locked" upgrade deadlock between concurrent writers.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    # Tests use a file too (one per test process), not SQLite's shared-cache memory
    # database: that one fails concurrent writers at once instead of waiting, unlike
    # the WAL file the embedded configuration really runs on.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A pool per process (psycopg-pool): a request thread or a run's database lane
    # borrows a connection and gives it back when Django closes it, so a burst of
    # requests waits for a connection instead of failing once PostgreSQL's
    # max_connections is reached (as a burst of run starts can), and no connection is
    # opened per request. Every process's pool counts against max_connections.
    # Each connection is checked as it is lent (an empty query): after a database
    # restart or failover the pool's idle connections are all dead, and without the
    # check each would fail one request or claim turn before being replaced.
    from psycopg_pool import ConnectionPool

    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": envint("AGENTFORGE_DB_POOL_SIZE", 20, minimum=1),
        "timeout": envfloat("AGENTFORGE_DB_POOL_TIMEOUT", 30.0, above=0),
        "check": ConnectionPool.check_connection}
    # Parameters bound by the server, not quoted into the SQL text by psycopg in Python,
    # which is a large share of a busy db_worker's CPU. Statements stay
    # unnamed (Django keeps psycopg's prepare_threshold off), so PostgreSQL still plans
    # each with its actual values.
    DATABASES["default"]["OPTIONS"]["server_side_binding"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- auth -------------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

# -- security ---------------------------------------------------------------------------
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", not DEBUG)
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# HTTPS in production: off by default (a TLS-terminating proxy in front usually does the
# redirect; HSTS is hard to take back), each one setting away.
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
if envbool("BEHIND_TLS_PROXY", False):
    # The proxy sets X-Forwarded-Proto (and strips it from clients): requests it received
    # over HTTPS count as secure (redirects, secure cookies, the WebSocket's wss origin).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# -- i18n / static ----------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = envstr("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
SERVE_STATIC = envbool("SERVE_STATIC", True)

# -- channels and tasks -----------------------------------------------------------------
REDIS_URL = envstr("REDIS_URL", "")
# The cache holds rate-limit counters (capability probes): shared by every process
# through Redis when there is one, else per process.
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": REDIS_URL}}
    # Django's own Redis cache increments atomically (INCR) and is shared; the check
    # only knows django-redis's.
    SILENCED_SYSTEM_CHECKS = ["django_ratelimit.W001"]
else:
    # The embedded configuration is one process: its in-memory cache is shared by every
    # request there is.
    SILENCED_SYSTEM_CHECKS = ["django_ratelimit.E003", "django_ratelimit.W001"]
# Which of channels_redis's layers carries the live notifications between processes
# (agentforge_web/channel_layers.py): "core" or "pubsub".
AGENTFORGE_CHANNEL_LAYER = envstr("AGENTFORGE_CHANNEL_LAYER", "core")
if AGENTFORGE_CHANNEL_LAYER not in CHANNEL_LAYER_BACKENDS:
    raise ImproperlyConfigured(
        f"AGENTFORGE_CHANNEL_LAYER must be one of {', '.join(CHANNEL_LAYER_BACKENDS)}, "
        f"got {AGENTFORGE_CHANNEL_LAYER!r}")
if REDIS_URL:
    CHANNEL_LAYERS = redis_channel_layers(
        AGENTFORGE_CHANNEL_LAYER, REDIS_URL,
        envint("CHANNEL_CAPACITY", 1000) if AGENTFORGE_CHANNEL_LAYER == "core" else 0)
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

TASK_BACKEND = envstr("TASK_BACKEND", "inprocess")
_TASK_BACKENDS = {
    "inprocess": "tools_app.runs.loops.task_backend.InProcessBackend",
    "database": "tools_app.runs.loops.task_wakeup.WakingDatabaseBackend",
    "immediate": "django.tasks.backends.immediate.ImmediateBackend",
}
if TASK_BACKEND not in _TASK_BACKENDS:
    raise ImproperlyConfigured(
        f"TASK_BACKEND must be one of {', '.join(_TASK_BACKENDS)}, got {TASK_BACKEND!r}"
    )
TASKS = {"default": {"BACKEND": _TASK_BACKENDS[TASK_BACKEND]}}

# -- the product ------------------------------------------------------------------------
AGENTFORGE_TOOL_MODULES = envlist("AGENTFORGE_TOOL_MODULES", ["tools_app.tools.example_tools"])
AGENTFORGE_MAX_VALUE_BYTES = envint("AGENTFORGE_MAX_VALUE_BYTES", 1_000_000, minimum=1024)
AGENTFORGE_LEASE_SECONDS = envfloat("AGENTFORGE_LEASE_SECONDS", 30.0, above=0)
AGENTFORGE_HEARTBEAT_SECONDS = envfloat("AGENTFORGE_HEARTBEAT_SECONDS", 5.0, above=0)
if AGENTFORGE_HEARTBEAT_SECONDS >= AGENTFORGE_LEASE_SECONDS:
    # The lease would run out between heartbeats and reapers would take over live runs.
    raise ImproperlyConfigured(
        f"AGENTFORGE_HEARTBEAT_SECONDS ({AGENTFORGE_HEARTBEAT_SECONDS:g}) must be shorter "
        f"than AGENTFORGE_LEASE_SECONDS ({AGENTFORGE_LEASE_SECONDS:g})"
    )
AGENTFORGE_MAX_RESUMES = envint("AGENTFORGE_MAX_RESUMES", 3, minimum=0)
# Runs one `db_worker` process executes at once (its --concurrency overrides this). 1 by
# default: a tool that kills its process (a segfault, os._exit, the OOM killer) then
# takes only its own run down; with more, the runs beside it are interrupted too (and
# resumed elsewhere).
AGENTFORGE_WORKER_CONCURRENCY = envint("AGENTFORGE_WORKER_CONCURRENCY", 1, minimum=1)
# Tasks one `db_worker` claim turn takes at most, however many slots are free: a burst
# is shared with the other workers (a crash then interrupts a share, not all of it); a
# lone worker takes the rest in the turns that follow.
AGENTFORGE_CLAIM_PER_TURN = envint("AGENTFORGE_CLAIM_PER_TURN", 10, minimum=1)
# Threads (and so database connections) that do the database work of the runs the
# embedded server drives, however many runs that is (runs.loops.task_backend's lanes). Two:
# each more thread takes the GIL from the loop that drives the runs, and one alone did
# worse in the embedded server, unlike in a db_worker.
AGENTFORGE_WORKER_DB_THREADS = envint("AGENTFORGE_WORKER_DB_THREADS", 2, minimum=1)
# The same for a `db_worker` process (its --db-threads overrides this): one. Its runs'
# batches then go in one writer's groups, larger and fewer, and one thread less takes
# the GIL from the runs' loop.
AGENTFORGE_DB_WORKER_DB_THREADS = envint("AGENTFORGE_DB_WORKER_DB_THREADS", 1, minimum=1)
# The event loop that drives the runs of a process (the embedded worker's, a db_worker's):
# "uvloop" (libuv's loop, where the package is installed: every platform but Windows) or
# "asyncio" (the standard library's). uvloop's costs a busy worker less CPU a round; the
# HTTP server's own loop is daphne's.
AGENTFORGE_WORKER_EVENT_LOOP = envstr("AGENTFORGE_WORKER_EVENT_LOOP", "uvloop")
if AGENTFORGE_WORKER_EVENT_LOOP not in ("uvloop", "asyncio"):
    raise ImproperlyConfigured('AGENTFORGE_WORKER_EVENT_LOOP must be "uvloop" or "asyncio", '
                               f"got {AGENTFORGE_WORKER_EVENT_LOOP!r}")
# Idle threads kept for the HTTP requests' synchronous code (one request at a time each,
# with its database connection: agentforge_web/handler.py); a burst gets more for its time.
AGENTFORGE_REQUEST_THREADS = envint("AGENTFORGE_REQUEST_THREADS", 8, minimum=1)
# After a stop signal, how long a `db_worker` waits for its runs to reach a step where they
# can stop; then it hands them back as they are and exits (0: wait as long as it takes).
AGENTFORGE_SHUTDOWN_GRACE_SECONDS = envfloat("AGENTFORGE_SHUTDOWN_GRACE_SECONDS", 25.0)
if AGENTFORGE_SHUTDOWN_GRACE_SECONDS < 0:
    raise ImproperlyConfigured("AGENTFORGE_SHUTDOWN_GRACE_SECONDS must be 0 or more, got "
                               f"{AGENTFORGE_SHUTDOWN_GRACE_SECONDS:g}")
# How long (seconds) a run waits for approval decisions before its waiting calls are
# rejected (the model is told, through the run's policy); the reapers check it. 0: no limit.
AGENTFORGE_APPROVAL_TIMEOUT = envfloat("AGENTFORGE_APPROVAL_TIMEOUT", 0.0)
if AGENTFORGE_APPROVAL_TIMEOUT < 0:
    raise ImproperlyConfigured("AGENTFORGE_APPROVAL_TIMEOUT must be 0 or more, got "
                               f"{AGENTFORGE_APPROVAL_TIMEOUT:g}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"redis_outage": {"()": "agentforge_web.channel_layers.RedisOutageInOneLine"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"channels_redis.pubsub": {"filters": ["redis_outage"]}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
# Values longer than this (characters) show a head with "show all" / download.
AGENTFORGE_DISPLAY_LIMIT = envint("AGENTFORGE_DISPLAY_LIMIT", 20_000, minimum=100)

# Capability probes call an endpoint with the server's credentials: staff may start them,
# other users only when AGENTFORGE_PROBE_NON_STAFF is on; each user at most
# AGENTFORGE_PROBE_RATE of them (django-ratelimit's "N/s|m|h|d").
AGENTFORGE_PROBE_NON_STAFF = envbool("AGENTFORGE_PROBE_NON_STAFF", False)
AGENTFORGE_PROBE_RATE = envstr("AGENTFORGE_PROBE_RATE", "10/h")
if not re.fullmatch(r"[1-9][0-9]*/[0-9]*[smhd]", AGENTFORGE_PROBE_RATE):
    raise ImproperlyConfigured(
        f"AGENTFORGE_PROBE_RATE={AGENTFORGE_PROBE_RATE!r}: give a rate like 10/h or 3/m")

# OTLP in (POST /v1/traces, tools_app/ingest): a request's body at most this many bytes
# (and as many once gunzipped), and each user at most AGENTFORGE_OTLP_RATE requests
# (django-ratelimit's "N/s|m|h|d"; past it, 429 with Retry-After).
AGENTFORGE_OTLP_MAX_BYTES = envint("AGENTFORGE_OTLP_MAX_BYTES", 8 * 1024 * 1024,
                                   minimum=1024)
AGENTFORGE_OTLP_RATE = envstr("AGENTFORGE_OTLP_RATE", "1200/m")
if not re.fullmatch(r"[1-9][0-9]*/[0-9]*[smhd]", AGENTFORGE_OTLP_RATE):
    raise ImproperlyConfigured(
        f"AGENTFORGE_OTLP_RATE={AGENTFORGE_OTLP_RATE!r}: give a rate like 1200/m or 50/s")
# A received run whose spans stopped coming this many seconds ago and whose root span
# never came is ended by the workers' sweeps as incomplete (tools_app/ingest/idle.py).
AGENTFORGE_OTLP_IDLE_SECONDS = envint("AGENTFORGE_OTLP_IDLE_SECONDS", 600, minimum=1)

# The recording proxy (/proxy/<endpoint>/..., tools_app/proxy): a proxied request's body
# at most this many bytes; a response larger than that is passed on but not recorded.
AGENTFORGE_PROXY_MAX_BYTES = envint("AGENTFORGE_PROXY_MAX_BYTES", 8 * 1024 * 1024,
                                    minimum=1024)
# Where its exchanges are recorded: "process", a recorder process the server starts (off
# the serving process's CPU and GIL), or "thread", a thread of the serving process.
AGENTFORGE_PROXY_RECORDER = envstr("AGENTFORGE_PROXY_RECORDER", "process")
if AGENTFORGE_PROXY_RECORDER not in ("process", "thread"):
    raise ImproperlyConfigured("AGENTFORGE_PROXY_RECORDER must be process or thread, got "
                               f"{AGENTFORGE_PROXY_RECORDER!r}")
# How much lower the recorder process's scheduling priority is than the server's (the
# `nice` increment, 0 to 19): recording is off the request path, so when both want the
# CPU the relayed requests go first and the recording catches up when it is free. Not
# applied on SQLite, where the recorder shares the server's write turn (a file lock).
AGENTFORGE_PROXY_RECORDER_NICE = envint("AGENTFORGE_PROXY_RECORDER_NICE", 10, minimum=0)
if AGENTFORGE_PROXY_RECORDER_NICE > 19:
    raise ImproperlyConfigured("AGENTFORGE_PROXY_RECORDER_NICE must be 0 to 19, got "
                               f"{AGENTFORGE_PROXY_RECORDER_NICE}")

# Isolated Python tools (a tool's "isolated" option; tools_app/engine/isolation): calls
# that run at once in worker processes of their own (more wait for one), each worker's
# address-space limit in MB (0: none), and the only environment variables a worker gets,
# by exact name (never the server's secrets: add a name only if the tools need it).
AGENTFORGE_ISOLATED_TOOL_WORKERS = envint("AGENTFORGE_ISOLATED_TOOL_WORKERS", 2, minimum=1)
AGENTFORGE_ISOLATED_TOOL_MEMORY_MB = envint("AGENTFORGE_ISOLATED_TOOL_MEMORY_MB", 512,
                                            minimum=0)
AGENTFORGE_ISOLATED_TOOL_ENV = envlist("AGENTFORGE_ISOLATED_TOOL_ENV",
                                       ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"])

# The environment variables an endpoint may read a credential from (its API key, env:
# headers, an env: proxy), as shell-style patterns: an endpoint edited in the admin must
# not be able to send any other variable of the server (DATABASE_URL, SECRET_KEY) to
# its model server.
AGENTFORGE_SECRET_ENV_ALLOW = envlist("AGENTFORGE_SECRET_ENV_ALLOW",
                                      ["*_API_KEY", "*_TOKEN", "*_PROXY_URL"])

# Where provider calls may connect: private, loopback, link-local (cloud metadata),
# shared and reserved addresses are refused unless a host name or network (CIDR) here
# allows them; loopback alone is allowed by AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK (on by
# default with DEBUG: the offline demo and local model servers such as Ollama).
AGENTFORGE_OUTBOUND_ALLOW = envlist("AGENTFORGE_OUTBOUND_ALLOW", [])
for _entry in AGENTFORGE_OUTBOUND_ALLOW:
    if "/" in _entry:
        try:
            ipaddress.ip_network(_entry, strict=False)
        except ValueError as _exc:
            raise ImproperlyConfigured(
                f"AGENTFORGE_OUTBOUND_ALLOW: {_entry!r} is not a network ({_exc})") from None
AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK = envbool("AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK", DEBUG)

# A live socket reads the run's new events this often even without a notification, so a
# channel layer that lost its connection (Redis restarted) delays the timeline, never
# freezes it.
AGENTFORGE_LIVE_POLL_SECONDS = envfloat("AGENTFORGE_LIVE_POLL_SECONDS", 5.0, above=0)

# The API's live events (GET /api/runs/<id>/events/stream, Server-Sent Events): a comment
# line this often keeps proxies from closing a quiet stream (and re-reads the run in case
# a notification was lost); each user may hold this many streams at once per process.
AGENTFORGE_API_STREAM_HEARTBEAT_SECONDS = envfloat(
    "AGENTFORGE_API_STREAM_HEARTBEAT_SECONDS", 15.0, above=0)
AGENTFORGE_API_STREAMS_PER_USER = envint("AGENTFORGE_API_STREAMS_PER_USER", 10, minimum=1)

# OTLP out (tools_app/otlp_export): every run exported as GenAI spans to this OTLP/HTTP
# endpoint (a base URL, /v1/traces added, or the traces URL), off when empty; headers in
# the form of OTEL_EXPORTER_OTLP_HEADERS ("authorization=Bearer%20x,k=v"), or _FILE.
AGENTFORGE_OTLP_ENDPOINT = envstr("AGENTFORGE_OTLP_ENDPOINT", "")
if AGENTFORGE_OTLP_ENDPOINT and not AGENTFORGE_OTLP_ENDPOINT.startswith(("http://",
                                                                         "https://")):
    raise ImproperlyConfigured("AGENTFORGE_OTLP_ENDPOINT must be an http:// or https:// URL "
                               "(the OTLP/HTTP endpoint, e.g. http://collector:4318)")
AGENTFORGE_OTLP_HEADERS = envsecret("AGENTFORGE_OTLP_HEADERS") or ""
# Spans waiting to be sent, per process; more are dropped (and counted), never waited for.
AGENTFORGE_OTLP_QUEUE_SIZE = envint("AGENTFORGE_OTLP_QUEUE_SIZE", 2048, minimum=1)
# Seconds one export request (with the exporter's retries) may take.
AGENTFORGE_OTLP_TIMEOUT = envfloat("AGENTFORGE_OTLP_TIMEOUT", 10.0, above=0)
# Megabytes (2**20 characters of JSON text) of conversation a process keeps, over all the
# runs it exports, so that a run's next change is read from where its export got to;
# past it the least recently changed runs' are let go (read whole once more next time).
AGENTFORGE_OTLP_EXPORT_MEMORY_MB = envint("AGENTFORGE_OTLP_EXPORT_MEMORY_MB", 64, minimum=0)
