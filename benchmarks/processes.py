"""The benchmarks' processes: a throwaway product (its environment, manage.py, a free
loopback port, stopping a child), the fake provider in a process of its own, and what
/proc says about processes and the machine (CPU seconds, busy ticks, peak memory).
Shared by bench_live, bench_product_path, bench_proxy, soak and bench_app_overhead.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

from benchmarks.common import ROOT

PYTHON = sys.executable
DAPHNE = str(Path(PYTHON).with_name("daphne"))
MANAGE_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(database_url: str, workdir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("REDIS_URL", "TASK_BACKEND", "AGENTFORGE_EMBEDDED_WORKER", "SECRET_KEY_FILE",
                 "AGENTFORGE_TOOL_MODULES"):
        env.pop(name, None)
    env.update({
        "DJANGO_SETTINGS_MODULE": "agentforge_web.settings",
        "DATABASE_URL": database_url,
        "DATA_DIR": str(workdir),
        "DEBUG": "0",  # as deployed; the session and the server share this throwaway key
        "SECRET_KEY": secrets.token_urlsafe(40),
        "ALLOWED_HOSTS": "127.0.0.1",
        "AGENTFORGE_OUTBOUND_ALLOW_LOOPBACK": "1",  # the fake provider listens on loopback
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        **extra,
    })
    return env


def manage(env: dict[str, str], *args: str, extra: dict[str, str] | None = None) -> str:
    done = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env={**env, **(extra or {})},
                          capture_output=True, text=True, timeout=MANAGE_TIMEOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stdout[-2000:]}"
                           f"{done.stderr[-3000:]}")
    return done.stdout


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class FakeLLM:
    """The product's fake provider in a process of its own, on a free loopback port."""

    def __init__(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/v1"
        self.process = subprocess.Popen(
            [PYTHON, "-m", "tools_app.fake_llm", "--host", "127.0.0.1", "--port", str(port),
             "--record-limit", "0"], cwd=ROOT, stdout=subprocess.DEVNULL)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, in clock ticks."""
    with open("/proc/stat") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


SERVICES = {"postgres": "PostgreSQL", "redis-server": "Redis"}


def services_cpu() -> dict[str, float]:
    """CPU seconds so far of the database and cache servers' processes (all of them:
    PostgreSQL's backends come and go with connections)."""
    totals = dict.fromkeys(SERVICES.values(), 0.0)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/comm") as comm:
                name = SERVICES.get(comm.read().strip())
            if name is not None:
                totals[name] += cpu_seconds(int(entry.name))
        except OSError:  # the process ended meanwhile
            continue
    return totals


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")
