"""What the runs of one event loop hand in at about the same time, done in groups: one
trip to a database lane for many runs (their batches' group commit, `batch_writer`;
their first claims, `runner`).

A loop has up to as many tasks doing a kind's groups as it has database lanes
(`task_backend.database_lanes()`): while one group's statements run in the database
(the GIL released), another is prepared, and a burst's first items are done at once,
alone; the items that arrive while every task is busy wait for the next group, so the
groups grow with the load and nothing waits on a timer.

A group's database work runs where its first item's run would have run its own
(asgiref's thread-sensitive context of that run's task: a lane of the in-process
backend or a db_worker, or a test's own thread and transaction); each event loop has
its own tasks, so no loop ever does another's items.

`AGENTFORGE_GROUP_COMMIT=off` (read once, at import, by every process that imports
this) does each item alone instead, at once, in its run's own context: `handle` gets a
group of one, as the caller would have done it without groups (each batch its own
transaction, each claim its own). It is the plain alternative the product-path
benchmark measures the groups against; unset or `on`, the default, changes nothing.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured

from tools_app.runs.loops.task_backend import database_lanes

ENVIRONMENT_VARIABLE = "AGENTFORGE_GROUP_COMMIT"


def grouping_chosen() -> bool:
    """Whether this process does items in groups: yes unless AGENTFORGE_GROUP_COMMIT
    says `off`. A bad value fails loudly, as every setting does."""
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() or "on"
    if value in ("on", "off"):
        return value == "on"
    raise ImproperlyConfigured(
        f"{ENVIRONMENT_VARIABLE} must be 'on' (the default) or 'off', not {value!r}")


GROUPED = grouping_chosen()


@dataclass
class Waiting[T, R]:
    item: T
    future: asyncio.Future[R]


@dataclass
class LoopQueue[T, R]:
    """The items waiting on one event loop, and the tasks doing them."""

    groups: LoopGroups[T, R]
    waiting: list[Waiting[T, R]] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def do_all(self) -> None:
        try:
            limit = self.groups.max_group
            while self.waiting:
                group, self.waiting = self.waiting[:limit], self.waiting[limit:]
                await self._do(group)
        finally:
            # Idle (or cancelled): nothing here refers to the loop any more (a task
            # would), so the loop's entry goes with the loop.
            self.tasks.discard(asyncio.current_task())

    async def _do(self, group: list[Waiting[T, R]]) -> None:
        try:
            outcomes = await sync_to_async(self.groups.handle)([w.item for w in group])
        except Exception as exc:  # `handle` returns its failures: not expected
            outcomes = [exc for _ in group]
        except BaseException:
            # Cancelled (its loop is closing): whether the group was done is unknown,
            # and nothing may be left to do what waits after it.
            error = RuntimeError(f"the {self.groups.name} was cancelled")
            for waiting in [*group, *self.waiting]:
                _settle(waiting.future, error)
            self.waiting = []
            raise
        for waiting, outcome in zip(group, outcomes, strict=True):
            _settle(waiting.future, outcome)


def _settle[R](future: asyncio.Future[R], outcome: R | BaseException) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class LoopGroups[T, R]:
    """`await groups.submit(item)`: `handle` (synchronous, on a database lane) gets the
    items of the loop waiting together and returns each one's result or the exception
    it failed with, in order."""

    def __init__(self, name: str, handle: Callable[[Sequence[T]], Sequence[R | Exception]],
                 max_group: int) -> None:
        self.name = name
        self.handle = handle
        self.max_group = max_group
        self.queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                               LoopQueue[T, R]] = weakref.WeakKeyDictionary()

    async def submit(self, item: T) -> R:
        if not GROUPED:
            return await self._alone(item)
        loop = asyncio.get_running_loop()
        queue = self.queues.get(loop)
        if queue is None:
            queue = self.queues[loop] = LoopQueue(self)
        future: asyncio.Future[R] = loop.create_future()
        queue.waiting.append(Waiting(item, future))
        if len(queue.tasks) < database_lanes():
            # Created here, in the context of this item's run: the group's database
            # work runs on that run's thread (module docstring).
            queue.tasks.add(loop.create_task(queue.do_all()))
        # Shielded: a run cancelled while its item is done stops waiting, and the group
        # (other runs' items with it) is still done.
        return await asyncio.shield(future)

    async def _alone(self, item: T) -> R:
        """The item done by itself, on its run's own lane (AGENTFORGE_GROUP_COMMIT=off)."""
        (outcome,) = await sync_to_async(self.handle)([item])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
