"""Start-up of the long-running processes that serve, execute or record runs (daphne,
db_worker, the proxy's recorder process)."""

from __future__ import annotations

import gc

# The cyclic collector's thresholds in a process that serves or runs: a young collection
# every 10,000 net allocations, not Python's 700. A request's, a batch's or a run
# step's objects mostly die before one, instead of being promoted into the older
# generations (whose collections walk everything there, the span cache and the runs'
# conversations included) only to die there. The older generations keep the defaults.
SERVING_GC_THRESHOLDS = (10_000, 10, 10)


def freeze_startup_objects() -> None:
    """Take what start-up built (modules, Django's setup, pydantic's validators: a few
    hundred thousand objects that live as long as the process) out of the cyclic
    garbage collector's scans, after collecting what is already garbage.

    A busy process (many runs allocating messages, events and HTTP objects) triggers
    full collections often, and each would walk all of them again. Then the
    collector is set to `SERVING_GC_THRESHOLDS`."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVING_GC_THRESHOLDS)


def preload_for_runs() -> None:
    """Import and build now what a process's first run would on its way (every provider
    adapter, the channel layer's backend with its Redis client, the model clients'
    default TLS context), which would otherwise be built on the one event loop while
    the first runs and the others started with them wait. Before
    `freeze_startup_objects`, so what this builds is frozen with the rest."""
    from channels.layers import get_channel_layer

    from tools_app.engine.providers.http.clients import default_ssl_context
    from tools_app.engine.providers.registry import PROVIDERS, chat_model_class

    for kind in PROVIDERS:
        chat_model_class(kind)
    get_channel_layer()
    default_ssl_context()
