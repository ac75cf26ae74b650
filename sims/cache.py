"""Memo of values derived from one ComputationalGraph (stage counts, layer kinds, model FLOPs).

Keyed by the graph's identity plus a key; each entry keeps the graph alive, so an id can never be
reused by another graph while its entry exists. The oldest entry goes once `maxsize` is exceeded.
`clear_caches()` empties every GraphCache (tests compare a sweep with configurations costed alone).
`PerHardware` keeps one GraphCache per parsed hardware spec (costs depend on its efficiency table).
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
        full_key = (id(graph), key)
        entry = self._entries.get(full_key)
        if entry is not None and entry[0] is graph:
            return entry[1]
        value = compute()
        self._entries[full_key] = (graph, value)
        if len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return value

    def peek(self, graph: ComputationalGraph, key: Hashable) -> Any:
        """The value kept for (graph, key), or None."""
        entry = self._entries.get((id(graph), key))
        return entry[1] if entry is not None and entry[0] is graph else None

    def entries(self, key: Hashable) -> list[tuple[ComputationalGraph, Any]]:
        """(graph, value) of every entry kept under `key`, the newest first."""
        return [entry for (_, kept), entry in reversed(self._entries.items()) if kept == key]

    def clear(self) -> None:
        self._entries.clear()


_ALL: WeakSet[GraphCache] = WeakSet()


class PerHardware:
    """One GraphCache per hardware spec object, the newest `specs` of them kept (each entry keeps its spec
    alive, so an id is never reused while its cache exists)."""

    def __init__(self, specs: int = 64, entries: int = 8192):
        self.specs, self.entries = specs, entries
        self._caches: OrderedDict[int, tuple[Any, GraphCache]] = OrderedDict()

    def of(self, hw: Any) -> GraphCache:
        cached = self._caches.get(id(hw))
        if cached is None or cached[0] is not hw:
            cached = self._caches[id(hw)] = (hw, GraphCache(maxsize=self.entries))
            if len(self._caches) > self.specs:
                self._caches.popitem(last=False)
        return cached[1]


def clear_caches() -> None:
    """Forget everything every GraphCache holds: the next simulate costs from scratch."""
    for cache in list(_ALL):
        cache.clear()
