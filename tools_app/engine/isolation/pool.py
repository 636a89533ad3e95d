"""The worker processes of isolated tools: started on first use, reused across calls.

Each worker is a fresh interpreter (`subprocess` runs `python -c BOOTSTRAP`: nothing of
the threaded server is forked), given only the allowed environment variables, so the
server's secrets are not in its environment, not even in its initial one. It limits its
own address space (`child.limit_memory`) and serves one call at a time.

A pool's calls run on threads of its own, as many as workers: a thread takes an idle
worker (or starts one), sends the call and waits for the reply, the worker's end, or a
wake-up. Abandoning a call (its timeout
passed, its run was cancelled) wakes that thread, which stops the worker (SIGTERM,
then SIGKILL after `terminate_grace`) and starts a new one at its next call. A worker
that dies (os._exit, a signal, the out-of-memory killer) is reported by its exit code
and replaced the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

DEFAULT_ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

BOOTSTRAP = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
             f"from {__package__}.child import main; main(sys.argv[2:])")

MEGABYTE = 1024 * 1024


@dataclass(frozen=True)
class IsolationSettings:
    """How isolated tools' workers are kept.

    - `workers`: calls that run at once (more wait for a worker);
    - `memory_mb`: each worker's address-space limit (0: none);
    - `env_allow`: the only environment variables a worker gets (exact names, values
      copied from the server's environment);
    - `terminate_grace`: seconds a stopped worker gets after SIGTERM before SIGKILL.
    """

    workers: int = 2
    memory_mb: int = 512
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    terminate_grace: float = 0.5


class PoolClosed(RuntimeError):
    """A call reached a pool after its shutdown."""


@dataclass(frozen=True)
class ChildReply:
    """What the worker answered: a tuple of plain values (see `child`)."""

    reply: tuple[Any, ...]


@dataclass(frozen=True)
class ChildExited:
    """The worker ended during the call: its exit code (negative: the signal)."""

    code: int


CallOutcome = ChildReply | ChildExited


def allowed_environment(names: Iterable[str]) -> dict[str, str]:
    """The server's values of the allowed variables, and nothing else."""
    return {name: os.environ[name] for name in names if name in os.environ}


class WorkerProcess:
    """One worker interpreter, its request and reply pipes, and a wake-up pipe that
    interrupts the wait for a reply."""

    def __init__(self, settings: IsolationSettings) -> None:
        self.grace = settings.terminate_grace
        to_child_read, to_child_write = os.pipe()
        from_child_read, from_child_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", BOOTSTRAP, json.dumps(sys.path), str(to_child_read),
                 str(from_child_write), str(settings.memory_mb * MEGABYTE),
                 str(os.getpid())],
                pass_fds=(to_child_read, from_child_write), stdin=subprocess.DEVNULL,
                env=allowed_environment(settings.env_allow))
        except BaseException:
            os.close(to_child_write)
            os.close(from_child_read)
            raise
        finally:
            os.close(to_child_read)
            os.close(from_child_write)
        self.requests = Connection(to_child_write, readable=False)
        self.replies = Connection(from_child_read, writable=False)
        self._wake_read, self._wake_write = os.pipe()
        self._lock = threading.Lock()  # stop() closes the wake-up pipe others write to
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def usable(self) -> bool:
        return not self.stopped and self.process.poll() is None

    def call(self, request: tuple[Any, ...]) -> CallOutcome | None:
        """Send one call; its outcome, or None if woken meanwhile (the worker is then
        stopped). Raises what pickling the request raises (nothing was sent then)."""
        try:
            self.requests.send(request)
        except (BrokenPipeError, ConnectionResetError):
            return ChildExited(self.process.wait())
        ready = wait([self.replies, self._wake_read])
        if self._wake_read in ready:
            self.stop()
            return None
        try:
            return ChildReply(self.replies.recv())
        except EOFError:
            return ChildExited(self.process.wait())

    def wake(self) -> None:
        """Interrupt the call in progress (any thread; never blocks on the worker)."""
        with self._lock:
            if not self.stopped:
                os.write(self._wake_write, b"!")

    def clear_wake(self) -> None:
        """Take back a wake-up that came after the call's reply."""
        os.read(self._wake_read, 1)

    def stop(self) -> None:
        """End the worker: its request pipe closed (which alone ends an idle one), then
        SIGTERM, and SIGKILL if it is still there after the grace."""
        with self._lock:
            if self.stopped:
                return
            self.stopped = True
            os.close(self._wake_write)
        self.requests.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(self.grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.replies.close()
        os.close(self._wake_read)


class _Job:
    """One call's way through the pool: queued, running on a worker, done, or
    abandoned (by the caller, at any point)."""

    def __init__(self, request: tuple[Any, ...]) -> None:
        self.request = request
        self._lock = threading.Lock()
        self._state = "queued"
        self._worker: WorkerProcess | None = None

    def start_on(self, worker: WorkerProcess) -> bool:
        with self._lock:
            if self._state == "abandoned":
                return False
            self._state, self._worker = "running", worker
            return True

    def finish(self) -> bool:
        """Done; True if it was abandoned while running (its worker was woken)."""
        with self._lock:
            woken = self._state == "abandoned" and self._worker is not None
            self._state = "done"
            return woken

    def abandon(self) -> None:
        with self._lock:
            if self._state == "running" and self._worker is not None:
                self._worker.wake()
            if self._state != "done":
                self._state = "abandoned"


class IsolatedToolPool:
    """Worker processes for isolated calls, at most `settings.workers`: a call takes an
    idle one (or starts one) on one of the pool's threads and gives it back after."""

    def __init__(self, settings: IsolationSettings) -> None:
        self.settings = settings
        self._threads = concurrent.futures.ThreadPoolExecutor(
            settings.workers, thread_name_prefix="agentforge-isolated")
        self._workers: set[WorkerProcess] = set()
        self._idle: list[WorkerProcess] = []
        self._lock = threading.Lock()
        self._closed = False

    async def call(self, func: Any, args: list[Any], kwargs: dict[str, Any]) -> CallOutcome:
        """Run `func(*args, **kwargs)` in a worker. Cancelling this stops the worker
        if the call had started."""
        job = _Job((func, args, kwargs))
        future = asyncio.get_running_loop().run_in_executor(self._threads, self._run, job)
        try:
            outcome = await future
        except asyncio.CancelledError:
            job.abandon()
            raise
        if outcome is None:  # woken by the shutdown, not abandoned by this caller
            raise PoolClosed("the isolated tools' worker pool was shut down during the call")
        return outcome

    def prestart(self) -> concurrent.futures.Future[None] | None:
        """Start the workers if none runs yet, so a first call does not wait for an
        interpreter to start (its tool's timeout counts that wait). On one of the pool's
        threads, which outlive their workers (`child.die_with`)."""
        with self._lock:
            if self._workers or self._closed:
                return None
        return self._threads.submit(self._start_idle_workers)

    def _start_idle_workers(self) -> None:
        with self._lock:
            while not self._closed and len(self._workers) < self.settings.workers:
                worker = WorkerProcess(self.settings)
                self._workers.add(worker)
                self._idle.append(worker)

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [worker.pid for worker in self._workers]

    def _run(self, job: _Job) -> CallOutcome | None:
        worker = self._checkout()
        if not job.start_on(worker):
            self._checkin(worker)
            return None
        outcome: CallOutcome | None = None
        try:
            # Raises what pickling the call raises: nothing was sent, the worker is fine.
            outcome = worker.call(job.request)
        finally:
            if job.finish() and not worker.stopped:
                worker.clear_wake()  # the caller gave up after the worker answered
            if worker.stopped or (outcome is not None and _ends_worker(outcome)):
                self._retire(worker)
            else:
                self._checkin(worker)
        return outcome

    def _checkout(self) -> WorkerProcess:
        """An idle worker, or a new one (the threads keep their number in bounds)."""
        gone: list[WorkerProcess] = []
        try:
            with self._lock:
                if self._closed:
                    raise PoolClosed("the isolated tools' worker pool was shut down")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.usable():
                        return worker
                    gone.append(worker)  # ended while idle (killed from outside)
                worker = WorkerProcess(self.settings)
                self._workers.add(worker)
                return worker
        finally:
            for worker in gone:
                self._retire(worker)

    def _checkin(self, worker: WorkerProcess) -> None:
        with self._lock:
            if not self._closed and worker.usable():
                self._idle.append(worker)
                return
        self._retire(worker)

    def _retire(self, worker: WorkerProcess) -> None:
        worker.stop()
        with self._lock:
            self._workers.discard(worker)

    def shutdown(self) -> None:
        """Stop every worker (a call in progress is interrupted) and the threads."""
        with self._lock:
            self._closed = True
            workers = list(self._workers)
        for worker in workers:
            worker.wake()
        self._threads.shutdown(wait=True)
        for worker in workers:
            worker.stop()
        with self._lock:
            self._workers.clear()
            self._idle.clear()


def _ends_worker(outcome: CallOutcome) -> bool:
    return isinstance(outcome, ChildExited) or outcome.reply[0] == "out_of_memory"


_pools: dict[IsolationSettings, IsolatedToolPool] = {}
_pools_lock = threading.Lock()


def isolated_pool(settings: IsolationSettings) -> IsolatedToolPool:
    """This process's pool for `settings`, created on first use (no process starts
    before a call needs one)."""
    with _pools_lock:
        pool = _pools.get(settings)
        if pool is None:
            pool = _pools[settings] = IsolatedToolPool(settings)
        return pool


def shutdown_isolated_pools() -> None:
    """Stop every pool's workers and threads (the worker process is stopping)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown()
