"""Isolated Python tools: a tool that runs in a worker process of its own.

`pool` keeps the worker processes (started on first use, reused across calls, each
with a memory limit and an environment from an allow-list only) and stops one whose
call is abandoned (its timeout passed, its run was cancelled); `child` is what runs in
them; `executor.IsolatedFunctionExecutor` is the tool executor that sends its calls
there. Results and errors come back as a `FunctionToolExecutor`'s would.
"""

from .executor import IsolatedFunctionExecutor
from .pool import (
    DEFAULT_ENV_ALLOW,
    IsolatedToolPool,
    IsolationSettings,
    PoolClosed,
    isolated_pool,
    shutdown_isolated_pools,
)

__all__ = [
    "DEFAULT_ENV_ALLOW",
    "IsolatedFunctionExecutor",
    "IsolatedToolPool",
    "IsolationSettings",
    "PoolClosed",
    "isolated_pool",
    "shutdown_isolated_pools",
]
