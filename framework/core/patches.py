"""Patch registry: small, filtered changes to a backend, applied by the runtime at fixed phases.

A patch is a function `fn(ctx: PatchContext) -> None` registered with filters. The runtime applies
the patches of the run's backend at each phase and records every decision (applied, skipped with
the reason, failed with the error) in the run directory's `patches.json`.

    @register_patch("torch.cpu_gloo", backend="torch", phase=Phase.PREPARE, hardware=["cpu"],
                    requires={"megatron-core": "<=0.16.1", "torch": ">=2.4"})
    def cpu_gloo(ctx: PatchContext) -> None: ...

Rules that keep patches safe (lessons from AMD Primus, see docs/architecture.md):
- phases are an Enum, checked at registration; a duplicate id is refused;
- `requires` maps a library's distribution name to a PEP 440 specifier set (`>=0.8,<0.17`,
  `==0.8.*`, a bare `0.8.*` = exact), pre-releases included; each is checked against the installed
  version and reported (library, installed version, constraint);
- a patch whose library is not installed or has no PEP 440 version is skipped *with that reason*;
- a failing patch stops the run unless it was registered `optional=True`;
- a patch body imports its heavy libraries itself, so importing a patch module stays cheap;
- each patch is applied at most once per run.
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import logging
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from framework.core.errors import BackendError, ConfigError

log = logging.getLogger(__name__)


class Phase(str, Enum):
    """Where in the lifecycle a patch runs (see framework.core.runtime for the whole order)."""

    PREPARE = "prepare"  # before adapter.prepare_backend(): env vars that must act before a library import
    CONVERT = "convert"  # right after adapter.convert_config(): ctx.backend_config may be adjusted
    SETUP = "setup"  # before trainer.setup(): device and runtime settings, the trainer class is known
    BEFORE_TRAIN = "before_train"  # after trainer.init(), before run_train(): ctx.trainer is built
    AFTER_TRAIN = "after_train"  # after run_train() returned: ctx.result is set


@dataclass(frozen=True)
class PatchContext:
    """What a patch (and its condition) may look at; later phases fill more attributes."""

    backend: str
    versions: Mapping[str, str | None]  # the backend's libraries: distribution name -> installed version
    model: str
    hardware: str
    accelerator: str
    phase: Phase
    config: Any = None  # the run's DictConfig
    backend_config: Any = None  # adapter.convert_config()'s result, from Phase.CONVERT on
    trainer: Any = None  # from Phase.BEFORE_TRAIN on
    result: Any = None  # the TrainingResult, at Phase.AFTER_TRAIN


@dataclass(frozen=True)
class Patch:
    id: str
    backend: str
    phase: Phase
    fn: Callable[[PatchContext], None]
    requires: Mapping[str, SpecifierSet] = field(default_factory=dict)
    models: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()
    condition: Callable[[PatchContext], bool] | None = None
    priority: int = 50
    optional: bool = False
    enabled: bool = True
    description: str = ""


@dataclass
class PatchOutcome:
    id: str
    phase: str
    status: str  # applied | skipped | failed
    reason: str = ""
    duration_s: float = 0.0
    error: str | None = None
    # library -> {"installed": version or None, "constraint": specifier}, for every `requires` entry
    requires: dict = field(default_factory=dict)


_REGISTRY: dict[str, Patch] = {}


def _as_specifier(library: str, spec: str) -> SpecifierSet:
    text = str(spec).strip()
    if text and text[0].isdigit():  # a bare "0.8.*" or "1.2" means an exact match
        text = "==" + text
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise ValueError(f"invalid requires[{library!r}] = {spec!r}: use PEP 440 like '>=0.8,<0.17' or '0.8.*'") from exc


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution (pip name, e.g. 'orbax-checkpoint'), None when absent."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def register_patch(
    id: str,
    *,
    backend: str,
    phase: Phase | str,
    requires: Mapping[str, str] | None = None,
    models: Iterable[str] = (),
    hardware: Iterable[str] = (),
    condition: Callable[[PatchContext], bool] | None = None,
    priority: int = 50,
    optional: bool = False,
    enabled: bool = True,
    description: str = "",
) -> Callable[[Callable[[PatchContext], None]], Callable[[PatchContext], None]]:
    """Decorator registering `fn` as a patch.

    requires: {distribution name: PEP 440 specifier}, each checked against the installed version.
    models / hardware: fnmatch patterns on the model name and on the hardware name or accelerator
    kind ("h100", "gpu", "cpu"); empty = any. priority: lower runs first. optional: a failure is
    recorded and the run goes on. enabled=False: off unless the config's `patches.enable` names it.
    """
    try:
        phase = Phase(phase)
    except ValueError:
        valid = ", ".join(p.value for p in Phase)
        raise ValueError(f"patch {id!r}: unknown phase {phase!r}; valid: {valid}") from None
    specifiers = {library: _as_specifier(library, spec) for library, spec in (requires or {}).items()}

    def decorate(fn: Callable[[PatchContext], None]) -> Callable[[PatchContext], None]:
        if id in _REGISTRY:
            raise ValueError(f"patch id {id!r} is already registered by {_REGISTRY[id].fn.__module__}")
        _REGISTRY[id] = Patch(
            id=id, backend=backend, phase=phase, fn=fn, requires=specifiers,
            models=tuple(models), hardware=tuple(hardware), condition=condition, priority=priority,
            optional=optional, enabled=enabled, description=description or (fn.__doc__ or "").strip(),
        )
        return fn

    return decorate


def unregister_patch(id: str) -> None:
    """Remove a patch (tests register throwaway patches)."""
    _REGISTRY.pop(id, None)


def registered_patches(backend: str | None = None) -> list[Patch]:
    return [p for p in _REGISTRY.values() if backend is None or p.backend == backend]


def requirement_report(patch: Patch, versions: Mapping[str, str | None]) -> dict:
    """{library: {"installed": ..., "constraint": ...}} for each of the patch's requirements.

    A library the adapter did not report is looked up in the installed distributions."""
    return {library: {"installed": versions[library] if library in versions else installed_version(library),
                      "constraint": str(spec)}
            for library, spec in patch.requires.items()}


def _requirement_reason(library: str, installed: str | None, constraint: str) -> str | None:
    if installed is None:
        return f"{library} not installed: cannot check {constraint}"
    try:
        parsed = Version(installed)
    except InvalidVersion:
        return f"{library} version {installed!r} is not PEP 440: cannot check {constraint}"
    if not SpecifierSet(constraint).contains(parsed, prereleases=True):
        return f"{library} {installed} not in {constraint}"
    return None


def skip_reason(patch: Patch, ctx: PatchContext) -> str | None:
    """The first filter that rules `patch` out for `ctx`, or None when it applies."""
    for library, entry in requirement_report(patch, ctx.versions).items():
        reason = _requirement_reason(library, entry["installed"], entry["constraint"])
        if reason:
            return reason
    if patch.models and not any(fnmatch.fnmatch(ctx.model, m) for m in patch.models):
        return f"model {ctx.model!r} not in {list(patch.models)}"
    targets = (ctx.hardware, ctx.accelerator)
    if patch.hardware and not any(fnmatch.fnmatch(t, h) for t in targets for h in patch.hardware):
        return f"hardware {ctx.hardware!r} ({ctx.accelerator}) not in {list(patch.hardware)}"
    if patch.condition is not None and not patch.condition(ctx):
        name = getattr(patch.condition, "__name__", "condition")
        return f"condition {name} is false"
    return None


class PatchRunner:
    """Applies one backend's patches phase by phase and keeps the report of every decision."""

    def __init__(self, backend: str, enable: Iterable[str] = (), disable: Iterable[str] = ()):
        self.backend = backend
        self.enable, self.disable = set(enable), set(disable)
        known = {p.id for p in registered_patches(backend)}
        unknown = sorted((self.enable | self.disable) - known)
        if unknown:
            valid = ", ".join(sorted(known)) or "none"
            raise ConfigError(f"patches.enable/disable: unknown patch id(s) {unknown} for backend {backend!r}; valid: {valid}")
        self.outcomes: list[PatchOutcome] = []
        self._applied: set[str] = set()
        self.versions: Mapping[str, str | None] = {}

    def _selection_reason(self, patch: Patch) -> str | None:
        if patch.id in self.disable:
            return "disabled by patches.disable"
        if not patch.enabled and patch.id not in self.enable:
            return "off by default (enable with patches.enable)"
        return None

    def apply(self, phase: Phase, ctx: PatchContext) -> list[PatchOutcome]:
        """Apply this phase's patches in priority order; raise BackendError if a required one fails."""
        self.versions = ctx.versions
        patches = sorted(
            (p for p in registered_patches(self.backend) if p.phase == phase),
            key=lambda p: (p.priority, p.id),
        )
        return [self._apply_one(p, ctx) for p in patches]

    def _apply_one(self, patch: Patch, ctx: PatchContext) -> PatchOutcome:
        requires = requirement_report(patch, ctx.versions)
        if patch.id in self._applied:
            return self._record(PatchOutcome(patch.id, patch.phase.value, "skipped", "already applied in this run",
                                             requires=requires))
        reason = self._selection_reason(patch) or skip_reason(patch, ctx)
        if reason:
            if "cannot check" in reason:
                log.warning("patch %s skipped: %s", patch.id, reason)
            return self._record(PatchOutcome(patch.id, patch.phase.value, "skipped", reason, requires=requires))
        start = time.perf_counter()
        try:
            patch.fn(ctx)
        except Exception as exc:  # recorded, then re-raised unless optional
            outcome = PatchOutcome(patch.id, patch.phase.value, "failed", "raised", time.perf_counter() - start,
                                   f"{type(exc).__name__}: {exc}", requires)
            self._record(outcome)
            if patch.optional:
                log.warning("optional patch %s failed: %s", patch.id, outcome.error)
                return outcome
            raise BackendError(f"patch {patch.id!r} failed: {outcome.error} (mark it optional or disable it with patches.disable=[{patch.id}])") from exc
        self._applied.add(patch.id)
        return self._record(PatchOutcome(patch.id, patch.phase.value, "applied", "", time.perf_counter() - start,
                                         requires=requires))

    def _record(self, outcome: PatchOutcome) -> PatchOutcome:
        self.outcomes.append(outcome)
        return outcome

    def report(self) -> dict:
        counts = {s: sum(o.status == s for o in self.outcomes) for s in ("applied", "skipped", "failed")}
        return {"backend": self.backend, "versions": dict(self.versions), "counts": counts,
                "patches": [vars(o) for o in self.outcomes]}
