"""Memo of values derived from one ComputationalGraph (stage counts, layer kinds, model FLOPs).

Keyed by the graph's identity plus a key; each entry keeps the graph alive, so an id can never be
reused by another graph while its entry exists. The oldest entry goes once `maxsize` is exceeded.
`clear_caches()` empties every GraphCache (tests compare a sweep with configurations costed alone).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any
from weakref import WeakSet

from sims.ir import ComputationalGraph


class GraphCache:
    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[int, Hashable], tuple[ComputationalGraph, Any]] = OrderedDict()
        _ALL.add(self)

    def get(self, graph: ComputationalGraph, key: Hashable, compute: Callable[[], Any]) -> Any:
        entry = self._entries.get((id(graph), key))
        if entry is not None and entry[0] is graph:
            return entry[1]
        value = compute()
        self._entries[(id(graph), key)] = (graph, value)
        if len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self._entries.clear()


_ALL: WeakSet[GraphCache] = WeakSet()


def clear_caches() -> None:
    """Forget everything every GraphCache holds: the next simulate costs from scratch."""
    for cache in list(_ALL):
        cache.clear()
