"""`prepared`'s reads evaluated as plain querysets, for the measurement of issue 39
(store/sql/write_path.py: `AGENTFORGE_WRITE_PATH=orm`): the queryset each caller's `build`
makes from its arguments, compiled and run by the ORM at every call, as any queryset
is. Same results by definition: `prepared.rows` and `prepared.instances` promise
what `list(build(*arguments))` returns."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from django.db.models import Model, QuerySet


def rows(key: Hashable, build: Callable[..., QuerySet[Any, Any]],
         *arguments: Any) -> list[Any]:
    """`list(build(*arguments))` (a values() or values_list() queryset); `key` names
    the shape `prepared` would keep, unused here."""
    del key
    return list(build(*arguments))


def instances[M: Model](key: Hashable, model: type[M],
                        build: Callable[..., QuerySet[M, M]], *arguments: Any) -> list[M]:
    """`list(build(*arguments))`: the model's instances, as the ORM's iteration makes
    them."""
    del key, model
    return list(build(*arguments))
