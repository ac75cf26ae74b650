"""Patch registry: registration rules, each filter, ordering, failures and the report."""

from __future__ import annotations

import subprocess
import sys

import pytest

from framework.core.errors import BackendError, ConfigError
from framework.core.patches import PatchContext, PatchRunner, Phase, register_patch, unregister_patch

BACKEND = "unit"


@pytest.fixture
def patches():
    """Register throwaway patches for backend 'unit'; removed after the test."""
    ids: list[str] = []
    calls: list[str] = []

    def add(id: str, phase=Phase.BEFORE_TRAIN, fail: bool = False, **filters):
        def body(ctx):
            calls.append(id)
            if fail:
                raise RuntimeError("broken")

        register_patch(id, backend=BACKEND, phase=phase, **filters)(body)
        ids.append(id)

    add.calls = calls
    yield add
    for id in ids:
        unregister_patch(id)


def ctx(version="1.2.0", model="qwen3_8b", hardware="h100", accelerator="gpu", phase=Phase.BEFORE_TRAIN, **versions):
    return PatchContext(BACKEND, {"unitlib": version, **versions}, model, hardware, accelerator, phase)


def statuses(runner):
    return {o.id: (o.status, o.reason) for o in runner.outcomes}


def test_unknown_phase_is_refused_at_registration():
    with pytest.raises(ValueError, match="unknown phase 'before_trian'; valid: prepare, convert, setup, before_train, after_train"):
        register_patch("x.typo", backend=BACKEND, phase="before_trian")


def test_duplicate_id_is_refused(patches):
    patches("dup")
    with pytest.raises(ValueError, match="already registered"):
        patches("dup")


def test_invalid_version_specifier_is_refused():
    with pytest.raises(ValueError, match=r"invalid requires\['unitlib'\] = '>>1'"):
        register_patch("x.badspec", backend=BACKEND, phase=Phase.SETUP, requires={"unitlib": ">>1"})


@pytest.mark.parametrize("spec,version,applies", [
    (">=0.8,<0.17", "0.16.1", True),
    (">=0.8,<0.17", "0.17.0", False),
    ("0.8.*", "0.8.3", True),
    ("0.8.*", "0.9.0", False),
    (">=1.0", "1.1rc1", True),  # release candidates are versions too (Primus dropped them)
    ("1.2.0", "1.2.0", True),
])
def test_version_filter(patches, spec, version, applies):
    patches("v", requires={"unitlib": spec})
    runner = PatchRunner(BACKEND)
    runner.apply(Phase.BEFORE_TRAIN, ctx(version=version))
    assert (patches.calls == ["v"]) == applies
    constraint = runner.outcomes[0].requires["unitlib"]["constraint"]
    assert runner.outcomes[0].requires == {"unitlib": {"installed": version, "constraint": constraint}}
    if not applies:
        assert statuses(runner)["v"] == ("skipped", f"unitlib {version} not in {constraint}")


@pytest.mark.parametrize("version", [None, "nightly-abc"])
def test_unknown_library_version_is_reported_not_silent(patches, version):
    patches("needs_version", requires={"unitlib": ">=1.0"})
    patches("any_version")
    runner = PatchRunner(BACKEND)
    runner.apply(Phase.BEFORE_TRAIN, ctx(version=version))
    status, reason = statuses(runner)["needs_version"]
    assert status == "skipped" and "cannot check >=1.0" in reason
    assert patches.calls == ["any_version"]


def test_each_library_constraint_is_checked_and_reported(patches):
    """Libraries the adapter reports are taken from ctx.versions; any other from the installed packages."""
    from importlib.metadata import version

    patches("both", requires={"unitlib": ">=1.0,<2", "packaging": ">=20"})
    patches("old_helper", requires={"unitlib": ">=1.0", "otherlib": "<1"})
    patches("absent", requires={"no-such-dist-xyz": ">=1"})
    runner = PatchRunner(BACKEND)
    runner.apply(Phase.BEFORE_TRAIN, ctx(otherlib="1.5"))
    assert patches.calls == ["both"]
    reasons = statuses(runner)
    assert reasons["old_helper"] == ("skipped", "otherlib 1.5 not in <1")
    assert reasons["absent"] == ("skipped", "no-such-dist-xyz not installed: cannot check >=1")
    both = next(o for o in runner.outcomes if o.id == "both")
    assert both.requires["packaging"] == {"installed": version("packaging"), "constraint": ">=20"}
    report = runner.report()
    assert report["versions"] == {"unitlib": "1.2.0", "otherlib": "1.5"}
    saved = {entry["id"]: entry for entry in report["patches"]}
    assert saved["both"]["requires"]["unitlib"] == {"installed": "1.2.0", "constraint": "<2,>=1.0"}


def test_the_context_carries_typed_attributes(patches):
    seen = []
    register_patch("typed", backend=BACKEND, phase=Phase.CONVERT)(lambda c: seen.append(c.backend_config))
    try:
        PatchRunner(BACKEND).apply(Phase.CONVERT, PatchContext(BACKEND, {}, "m", "cpu", "cpu", Phase.CONVERT,
                                                               backend_config={"lr": 1}))
    finally:
        unregister_patch("typed")
    assert seen == [{"lr": 1}]


def test_a_patch_package_imports_every_submodule(tmp_path, monkeypatch):
    """BackendAdapter.patch_modules may name a package: one topic per file, all registered."""
    from framework.core.adapter import BackendAdapter
    from framework.core.patches import registered_patches

    package = tmp_path / "unit_patch_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for topic in ("devices", "numerics"):
        (package / f"{topic}.py").write_text(
            "from framework.core.patches import register_patch\n"
            f"register_patch('pkg.{topic}', backend='pkg', phase='setup')(lambda ctx: None)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    class PackageAdapter(BackendAdapter):
        name, trainers, patch_modules = "pkg", {}, ("unit_patch_pkg",)

        def convert_config(self, cfg):
            return cfg

    try:
        PackageAdapter().load_patches()
        assert sorted(p.id for p in registered_patches("pkg")) == ["pkg.devices", "pkg.numerics"]
    finally:
        for topic in ("devices", "numerics"):
            unregister_patch(f"pkg.{topic}")


def test_model_hardware_and_condition_filters(patches):
    patches("qwen_only", models=["qwen3*"])
    patches("llama_only", models=["llama*"])
    patches("gpu_kind", hardware=["gpu"])
    patches("tpu_only", hardware=["tpu_v5*"])
    patches("never", condition=lambda c: False)
    runner = PatchRunner(BACKEND)
    runner.apply(Phase.BEFORE_TRAIN, ctx())
    assert sorted(patches.calls) == ["gpu_kind", "qwen_only"]
    reasons = statuses(runner)
    assert reasons["llama_only"] == ("skipped", "model 'qwen3_8b' not in ['llama*']")
    assert reasons["tpu_only"] == ("skipped", "hardware 'h100' (gpu) not in ['tpu_v5*']")
    assert reasons["never"] == ("skipped", "condition <lambda> is false")


def test_priority_orders_and_phase_separates(patches):
    patches("late", priority=90)
    patches("early", priority=10)
    patches("setup_only", phase=Phase.SETUP)
    runner = PatchRunner(BACKEND)
    runner.apply(Phase.BEFORE_TRAIN, ctx())
    assert patches.calls == ["early", "late"]


def test_failing_patch_stops_the_run_unless_optional(patches):
    patches("soft", fail=True, optional=True, priority=1)
    patches("hard", fail=True, priority=2)
    runner = PatchRunner(BACKEND)
    with pytest.raises(BackendError, match="patch 'hard' failed: RuntimeError: broken"):
        runner.apply(Phase.BEFORE_TRAIN, ctx())
    report = runner.report()
    assert report["counts"] == {"applied": 0, "skipped": 0, "failed": 2}
    assert [p["error"] for p in report["patches"]] == ["RuntimeError: broken"] * 2


def test_enable_disable_by_id_and_unknown_ids(patches):
    patches("default_on")
    patches("default_off", enabled=False)
    runner = PatchRunner(BACKEND, disable=["default_on"])
    runner.apply(Phase.BEFORE_TRAIN, ctx())
    assert patches.calls == []
    assert statuses(runner)["default_off"] == ("skipped", "off by default (enable with patches.enable)")
    PatchRunner(BACKEND, enable=["default_off"]).apply(Phase.BEFORE_TRAIN, ctx())
    assert patches.calls == ["default_off", "default_on"]  # same priority: by id
    with pytest.raises(ConfigError, match=r"unknown patch id\(s\) \['nope'\] for backend 'unit'; valid: default_off, default_on"):
        PatchRunner(BACKEND, enable=["nope"])


def test_a_patch_applies_once_per_run(patches):
    patches("once")
    runner = PatchRunner(BACKEND)
    runner.apply(Phase.BEFORE_TRAIN, ctx())
    runner.apply(Phase.BEFORE_TRAIN, ctx())
    assert patches.calls == ["once"]
    assert statuses(runner)["once"] == ("skipped", "already applied in this run")


def test_importing_framework_imports_no_heavy_library():
    code = ("import sys, framework, framework.core.runtime, framework.core.patches, framework.cli, "
            "framework.backends.sim.adapter; "
            "heavy = [m for m in ('torch', 'jax', 'mlx', 'transformers', 'flax', 'megatron') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
