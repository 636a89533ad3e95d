"""Settings come from the environment and bad values fail loudly at start.

Each case starts a fresh interpreter (`django.setup()` with a controlled environment),
because settings are read once, at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SETTINGS_VARIABLES = {
    "DATA_DIR", "DEBUG", "SECRET_KEY", "SECRET_KEY_FILE", "ALLOWED_HOSTS",
    "CSRF_TRUSTED_ORIGINS", "DATABASE_URL", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE",
    "TIME_ZONE", "SERVE_STATIC", "REDIS_URL", "CHANNEL_CAPACITY", "TASK_BACKEND", "LOG_LEVEL",
    "AGENTFORGE_CHANNEL_LAYER",
    "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "BEHIND_TLS_PROXY", "SECURE_HSTS_PRELOAD",
}
SCRIPT = """
import json, django
django.setup()
from django.conf import settings
print(json.dumps({
    "debug": settings.DEBUG,
    "allowed_hosts": settings.ALLOWED_HOSTS,
    "database": settings.DATABASES["default"],
    "channel_layer": settings.CHANNEL_LAYERS["default"],
    "tasks": settings.TASKS["default"]["BACKEND"],
    "lease": settings.AGENTFORGE_LEASE_SECONDS,
    "heartbeat": settings.AGENTFORGE_HEARTBEAT_SECONDS,
    "https": [settings.SECURE_SSL_REDIRECT, settings.SECURE_HSTS_SECONDS,
              settings.SECURE_HSTS_INCLUDE_SUBDOMAINS, settings.SECURE_PROXY_SSL_HEADER],
}, default=str))
"""


# A start with DEBUG off (the default) needs one; the cases that test its absence drop it.
A_SECRET_KEY = "a-test-secret-key-" + "x" * 40


def start(tmp_path: Path, *, without: tuple[str, ...] = (),
          **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in SETTINGS_VARIABLES and not k.startswith("AGENTFORGE_")}
    clean |= {"DJANGO_SETTINGS_MODULE": "agentforge_web.settings", "DATA_DIR": str(tmp_path),
              "SECRET_KEY": A_SECRET_KEY}
    env = {k: v for k, v in (clean | env).items() if k not in without}
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def started(tmp_path: Path, *, without: tuple[str, ...] = (), **env: str) -> dict[str, Any]:
    result = start(tmp_path, without=without, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def refused(tmp_path: Path, *, without: tuple[str, ...] = (), **env: str) -> str:
    """The ImproperlyConfigured line a start with this environment fails with."""
    result = start(tmp_path, without=without, **env)
    assert result.returncode != 0, f"started with {env}: {result.stdout}"
    lines = [line for line in result.stderr.splitlines()
             if line.startswith("django.core.exceptions.ImproperlyConfigured")]
    assert lines, result.stderr
    return lines[-1]


PRODUCTION = {"DEBUG": "0", "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "agentforge.example.com"}


@pytest.mark.parametrize("hosts", ["*", "agentforge.example.com, * "])
def test_debug_off_refuses_a_wildcard_allowed_hosts(tmp_path: Path, hosts: str) -> None:
    message = refused(tmp_path, **PRODUCTION | {"ALLOWED_HOSTS": hosts})
    assert "ALLOWED_HOSTS" in message


def test_debug_on_allows_a_wildcard_allowed_hosts(tmp_path: Path) -> None:
    assert started(tmp_path, DEBUG="1", ALLOWED_HOSTS="*")["allowed_hosts"] == ["*"]


def test_https_settings_are_off_by_default_and_set_from_the_environment(
    tmp_path: Path,
) -> None:
    assert started(tmp_path)["https"] == [False, 0, False, None]
    https = started(tmp_path, SECURE_SSL_REDIRECT="1", SECURE_HSTS_SECONDS="31536000",
                    SECURE_HSTS_INCLUDE_SUBDOMAINS="1", BEHIND_TLS_PROXY="1")["https"]
    assert https == [True, 31536000, True, ["HTTP_X_FORWARDED_PROTO", "https"]]
    assert "SECURE_HSTS_SECONDS" in refused(tmp_path, SECURE_HSTS_SECONDS="-1")


def test_debug_off_requires_a_secret_key(tmp_path: Path) -> None:
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    assert "SECRET_KEY" in refused(tmp_path, without=("SECRET_KEY",), **env)
    assert "SECRET_KEY" in refused(tmp_path, **env, SECRET_KEY="")


def test_debug_is_off_unless_asked_for(tmp_path: Path) -> None:
    """Issue 42, finding 14: a start that does not say DEBUG=1 (daphne, manage.py, a
    service unit) runs with DEBUG off, and without a SECRET_KEY it fails loudly naming
    it rather than using the dev key."""
    assert started(tmp_path)["debug"] is False
    message = refused(tmp_path, without=("SECRET_KEY",))
    assert "SECRET_KEY must be set when DEBUG is off" in message
    assert started(tmp_path, without=("SECRET_KEY",), DEBUG="1")["debug"] is True


def test_the_development_settings_turn_debug_on(tmp_path: Path) -> None:
    """The test suite and the type checker load agentforge_web.settings_dev: DEBUG on with
    the dev key, put in the environment for the processes tests start; an explicit
    DEBUG=0 is kept."""
    dev = {"DJANGO_SETTINGS_MODULE": "agentforge_web.settings_dev"}
    assert started(tmp_path, without=("SECRET_KEY",), **dev)["debug"] is True
    assert started(tmp_path, **dev, DEBUG="0")["debug"] is False


@pytest.mark.parametrize(("environment", "expected"), [({}, "1"), ({"DEBUG": "0"}, "0")])
def test_make_runs_everything_with_debug_on(environment: dict[str, str], expected: str) -> None:
    """`make run` (and every other target) exports DEBUG=1 unless the environment sets it:
    a recipe added on the fly prints what the Makefile's recipes see."""
    env = {k: v for k, v in os.environ.items() if k != "DEBUG"} | environment
    result = subprocess.run(
        ["make", "--no-print-directory", "--eval", 'show-debug: ; @echo "$$DEBUG"',
         "show-debug"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
        check=True)
    assert result.stdout.strip() == expected


def test_an_unreadable_secret_key_file_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, **PRODUCTION, SECRET_KEY_FILE=str(tmp_path / "missing"))
    assert "SECRET_KEY_FILE" in message


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DEBUG", "maybe"),
        ("SERVE_STATIC", "2"),
        ("AGENTFORGE_MAX_RESUMES", "three"),
        ("AGENTFORGE_MAX_RESUMES", "-1"),
        ("AGENTFORGE_MAX_VALUE_BYTES", "1e6"),
        ("AGENTFORGE_LEASE_SECONDS", "soon"),
        ("AGENTFORGE_HEARTBEAT_SECONDS", "often"),
        ("AGENTFORGE_WORKER_CONCURRENCY", "0"),
        ("AGENTFORGE_WORKER_CONCURRENCY", "many"),
        ("AGENTFORGE_SHUTDOWN_GRACE_SECONDS", "-1"),
        ("AGENTFORGE_SHUTDOWN_GRACE_SECONDS", "soon"),
        ("AGENTFORGE_APPROVAL_TIMEOUT", "-5"),
        ("AGENTFORGE_APPROVAL_TIMEOUT", "never"),
        ("AGENTFORGE_OUTBOUND_ALLOW", "10.0.0.0/33"),
        ("AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK", "sometimes"),
        ("AGENTFORGE_PROBE_RATE", "ten an hour"),
        ("AGENTFORGE_PROBE_RATE", "0/h"),
        ("AGENTFORGE_PROBE_NON_STAFF", "perhaps"),
        ("AGENTFORGE_LOGIN_FAILURE_LIMIT", "0"),
        ("AGENTFORGE_LOGIN_COOLOFF_MINUTES", "a while"),
        ("AGENTFORGE_WORKER_EVENT_LOOP", "trio"),
        ("AGENTFORGE_PROXY_RECORDER_NICE", "-1"),
        ("AGENTFORGE_PROXY_RECORDER_NICE", "20"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(
    tmp_path: Path, variable: str, value: str
) -> None:
    message = refused(tmp_path, **{variable: value})
    assert variable in message
    assert repr(value) in message or value in message


def test_a_bad_channel_capacity_is_refused_when_redis_is_used(tmp_path: Path) -> None:
    message = refused(tmp_path, REDIS_URL="redis://127.0.0.1:6379/0", CHANNEL_CAPACITY="lots")
    assert "CHANNEL_CAPACITY" in message


@pytest.mark.parametrize(
    ("variable", "value"),
    [("AGENTFORGE_LEASE_SECONDS", "nan"), ("AGENTFORGE_LEASE_SECONDS", "0"),
     ("AGENTFORGE_HEARTBEAT_SECONDS", "-5"), ("AGENTFORGE_HEARTBEAT_SECONDS", "inf")],
)
def test_a_lease_or_heartbeat_that_cannot_work_is_refused(
    tmp_path: Path, variable: str, value: str
) -> None:
    """A NaN, infinite, zero or negative duration would only fail (or never expire) at
    run time, in every worker: refuse it at start."""
    message = refused(tmp_path, **{variable: value})
    assert variable in message
    assert repr(value) in message


def test_a_heartbeat_not_shorter_than_the_lease_is_refused(tmp_path: Path) -> None:
    """The lease would expire between heartbeats: reapers would steal live runs."""
    message = refused(tmp_path, AGENTFORGE_LEASE_SECONDS="5", AGENTFORGE_HEARTBEAT_SECONDS="5")
    assert "AGENTFORGE_HEARTBEAT_SECONDS" in message
    assert "AGENTFORGE_LEASE_SECONDS" in message


@pytest.mark.parametrize("value", ["celery", "Database"])
def test_an_unknown_task_backend_is_refused(tmp_path: Path, value: str) -> None:
    message = refused(tmp_path, TASK_BACKEND=value)
    assert "TASK_BACKEND" in message
    assert "inprocess, database, immediate" in message


def test_the_default_is_the_embedded_configuration(tmp_path: Path) -> None:
    config = started(tmp_path)
    assert config["debug"] is False  # DEBUG only when asked for (test above)
    assert config["database"]["ENGINE"] == "django.db.backends.sqlite3"
    assert config["database"]["NAME"] == str(tmp_path / "agentforge.sqlite3")
    assert config["channel_layer"]["BACKEND"] == "channels.layers.InMemoryChannelLayer"
    assert config["tasks"] == "tools_app.runs.loops.task_backend.InProcessBackend"
    assert (config["lease"], config["heartbeat"]) == (30.0, 5.0)


def test_the_scale_out_configuration_is_honoured(tmp_path: Path) -> None:
    config = started(
        tmp_path, **PRODUCTION,
        DATABASE_URL="postgres://agent:pw@db.internal:6543/agentforge",
        REDIS_URL="redis://cache.internal:6380/2", CHANNEL_CAPACITY="250",
        TASK_BACKEND="database",
        AGENTFORGE_LEASE_SECONDS="12.5", AGENTFORGE_HEARTBEAT_SECONDS="2",
    )
    assert config["debug"] is False
    assert config["allowed_hosts"] == ["agentforge.example.com"]
    database = config["database"]
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert (database["NAME"], database["USER"], database["PASSWORD"]) == ("agentforge", "agent",
                                                                          "pw")
    assert (database["HOST"], int(database["PORT"])) == ("db.internal", 6543)
    assert config["channel_layer"] == {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": "redis://cache.internal:6380/2",
                              "socket_timeout": 30}], "capacity": 250},
    }
    assert config["tasks"] == "tools_app.runs.loops.task_wakeup.WakingDatabaseBackend"
    assert (config["lease"], config["heartbeat"]) == (12.5, 2.0)


def test_the_pubsub_channel_layer_is_chosen_named_apart_per_database(tmp_path: Path,
                                                                      ) -> None:
    config = started(tmp_path, **PRODUCTION, REDIS_URL="redis://cache.internal:6380/2",
                     AGENTFORGE_CHANNEL_LAYER="pubsub")
    assert config["channel_layer"] == {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [{"address": "redis://cache.internal:6380/2"}],
                   "prefix": "agentforge.2."},
    }


def test_an_unknown_channel_layer_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, REDIS_URL="redis://127.0.0.1:6379/0",
                      AGENTFORGE_CHANNEL_LAYER="kafka")
    assert "AGENTFORGE_CHANNEL_LAYER must be one of core, pubsub, got 'kafka'" in message


def test_the_documented_production_settings_pass_check_deploy(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items()
             if k not in SETTINGS_VARIABLES and not k.startswith("AGENTFORGE_")}
    env = clean | PRODUCTION | {
        "DJANGO_SETTINGS_MODULE": "agentforge_web.settings", "DATA_DIR": str(tmp_path),
        "SECRET_KEY": "a-long-random-production-secret-" + "k7Qz" * 10,
        "SECURE_SSL_REDIRECT": "1", "SECURE_HSTS_SECONDS": "31536000",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1", "SECURE_HSTS_PRELOAD": "1",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_pubsub_layers_outage_errors_are_logged_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis away: the pub/sub layer's receive task logs each failed read with a
    traceback, once a second; the configured filter makes each one line naming the
    error. Other errors keep their traceback."""
    import logging

    import redis.exceptions

    logger = logging.getLogger("channels_redis.pubsub")
    with caplog.at_level("ERROR", logger="channels_redis.pubsub"):
        for error in (redis.exceptions.ConnectionError("Error 111 connecting"),
                      ValueError("a bug")):
            try:
                raise error
            except Exception:
                logger.exception("Unexpected exception in receive task")
    outage, bug = caplog.records
    assert outage.getMessage() == ("Unexpected exception in receive task "
                                   "(ConnectionError: Error 111 connecting)")
    assert outage.exc_info is None
    assert bug.exc_info is not None
