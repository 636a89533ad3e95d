"""`make run` serves with a listen backlog a burst fits in: with daphne's `-b`/`-p`
(Twisted's backlog of 50) a burst of 100 connections had some dropped and retried by
their clients a second later (docs/benchmarks/product-path.md). The command is taken
from the Makefile as make would run it, started, and its listening socket read back
from the kernel (`ss`: a listening socket's Send-Q is its backlog)."""

from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path

from tests.server_support import ROOT, TIMEOUT, environment, free_port

BACKLOG = 1024


def served_command(port: int) -> list[str]:
    """The daphne command `make run` runs (make -n prints it without running it)."""
    printed = subprocess.run(["make", "-n", "run", f"PORT={port}", "HOST=127.0.0.1"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60,
                             check=True).stdout.replace("\\\n", " ")
    line = next(x for x in printed.splitlines() if "bin/daphne" in x)
    return shlex.split(line)


def listen_backlog(port: int) -> int | None:
    """The backlog of the socket listening on 127.0.0.1:port, or None if none is."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                         text=True, timeout=10, check=True).stdout.split()
    # State, Recv-Q, Send-Q (the backlog), local address, peer address.
    return int(out[2]) if out else None


def test_make_run_serves_with_a_backlog_a_burst_fits_in(tmp_path: Path) -> None:
    port = free_port()
    command = served_command(port)
    assert command[0].endswith("daphne"), command
    env = environment(tmp_path) | {"AGENTFORGE_EMBEDDED_WORKER": "0"}
    log = tmp_path / "daphne.log"
    with log.open("wb") as out:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + TIMEOUT
        while (backlog := listen_backlog(port)) is None:
            assert server.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        assert backlog == BACKLOG
    finally:
        server.terminate()
        server.wait(timeout=TIMEOUT)
