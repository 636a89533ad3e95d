"""Renderings kept per slot (a run) and reused while what they were made from is equal:
the live header and the run page's `{% memo %}` blocks."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class KeptRenderings[H: str]:
    """The last rendering of each slot with the inputs it was made from, for up to
    `slots` slots (the oldest kept let go first); safe across threads."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._kept: OrderedDict[Hashable, tuple[Any, H]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, slot: Hashable, inputs: Any, render: Callable[[], H]) -> H:
        """The slot's kept rendering if its inputs equal `inputs`, else `render()`,
        kept for next time."""
        with self._lock:
            kept = self._kept.get(slot)
        if kept is not None and kept[0] == inputs:
            return kept[1]
        html = render()
        with self._lock:
            self._kept[slot] = (inputs, html)
            self._kept.move_to_end(slot)
            while len(self._kept) > self.slots:
                self._kept.popitem(last=False)
        return html
