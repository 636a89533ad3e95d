"""The Redis channel layers the scale-out configuration can carry live notifications on
(settings.py chooses one with AGENTFORGE_CHANNEL_LAYER).

"core", the default: channels_redis's list-based layer. A group send looks the group up
and pushes to each member's list; each process polls its lists with a blocking pop, and
a list past `capacity` messages drops the new ones. A run nobody watches is not
announced at all (tools_app/live/watching.py), which keeps an unwatched run's path free
of Redis.

"pubsub": channels_redis's Redis pub/sub layer. A notification is one PUBLISH, pushed by
Redis to the processes subscribed to its group, every run's every batch (there is no
group to look up first). A socket stays open while Redis restarts and its subscriptions
are made again once Redis is back. Pub/sub channels are one namespace for a whole Redis
server, whatever database the URL names, so the prefix keeps deployments on different
databases apart. A process's messages wait in memory until its consumers take them (the
consumers only note a seq and read the database).

Either delivers at most once: the viewers read by seq from the database and poll it, so
a notification lost (a full list, Redis restarting) costs a delay, never a gap.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any

BACKENDS = {"core": "channels_redis.core.RedisChannelLayer",
            "pubsub": "channels_redis.pubsub.RedisPubSubChannelLayer"}


def redis_channel_layers(kind: str, redis_url: str, capacity: int) -> dict[str, Any]:
    """CHANNEL_LAYERS for the layer `kind` on `redis_url`."""
    if kind == "pubsub":
        database = urllib.parse.urlsplit(redis_url).path.strip("/") or "0"
        config: dict[str, Any] = {"hosts": [{"address": redis_url}],
                                  "prefix": f"agentforge.{database}."}
    else:
        # A read may wait longer than redis-py's default socket timeout (5 s): the core
        # layer blocks its receive for 5 s in BZPOPMIN, so with that default an idle
        # socket's receive failed ("Timeout reading") and the viewer stopped getting
        # live updates.
        config = {"hosts": [{"address": redis_url, "socket_timeout": 30}],
                  "capacity": capacity}
    return {"default": {"BACKEND": BACKENDS[kind], "CONFIG": config}}


class RedisOutageInOneLine(logging.Filter):
    """The pub/sub layer logs each failed read of its subscription, once a second while
    Redis is away, with a traceback: an outage, an expected event, is one line a
    second instead, naming the error."""

    def filter(self, record: logging.LogRecord) -> bool:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, RedisConnectionError | RedisTimeoutError | OSError):
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {error})"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True
