"""Config checks that run before anything heavy: option names, key names, types, `_target_` signatures.

Every check raises ConfigError with one line naming the key and what is valid.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

from omegaconf import DictConfig, OmegaConf

from framework.core.build import HYDRA_KEYS
from framework.core.errors import ConfigError
from framework.core.paths import CONF_DIR, path_parts
from framework.core.ranges import range_of



def import_target(path: str, key: str, field: str = "_target_") -> Any:
    module_name, _, attr = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{key}.{field}: cannot import {path!r} ({exc})") from None


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def type_error(value: Any, tp: Any) -> str | None:
    """Why `value` (a plain container value) does not fit annotation `tp`, or None if it does."""
    if tp is Any or tp is inspect.Parameter.empty:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:  # a declared numeric range (framework/core/ranges.py)
        base, bounds = typing.get_args(tp)[0], range_of(tp)
        if bounds is not None and isinstance(value, float) and not math.isfinite(value):
            return bounds.error(value)  # None where the range allows NaN/inf
        reason = type_error(value, base)
        if reason is None and bounds is not None and isinstance(value, (int, float)):
            reason = bounds.error(value)
        return reason
    if origin in (Union, types.UnionType):
        arms = typing.get_args(tp)
        reasons = [type_error(value, arg) for arg in arms]
        if any(r is None for r in reasons):
            return None
        others = [r for arg, r in zip(arms, reasons) if arg is not type(None)]
        if len(others) == 1:  # Optional[X]: X's reason (a range, a type), with null allowed
            return f"{others[0]} (or null)"
        # X | Literal[...]: each arm's expectation, once the value: "expected an integer or one of ['auto'], got 'x'"
        wants = [reason.rsplit(", got ", 1)[0] for reason in others]
        wants = [wants[0], *(want.removeprefix("expected ") for want in wants[1:])]
        return f"{' or '.join(wants)}, got {value!r}"
    if origin is Literal:
        options = typing.get_args(tp)
        return None if value in options else f"expected one of {list(options)}, got {value!r}"
    if tp is type(None):
        return None if value is None else f"expected null, got {value!r}"
    if origin in (list, tuple, typing.Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return f"expected a list, got {value!r}"
        args = typing.get_args(tp)
        item_tp = args[0] if args and (origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)) else Any
        for item in value:
            if (reason := type_error(item, item_tp)) is not None:
                return f"list item: {reason}"
        return None
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            return f"expected a mapping, got {value!r}"
        value_tp = (typing.get_args(tp) or (Any, Any))[1]
        for name, item in value.items():
            if (reason := type_error(item, value_tp)) is not None:
                return f"{name}: {reason}"
        return None
    if dataclasses.is_dataclass(tp):
        return None if isinstance(value, dict) else f"expected a mapping for {tp.__name__}, got {value!r}"
    if tp is bool:
        return None if isinstance(value, bool) else f"expected true/false, got {value!r}"
    if tp is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else f"expected an integer, got {value!r}"
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            return f"{value} is not a finite number"
        return None if ok else f"expected a number, got {value!r}"
    if tp is str:
        return None if isinstance(value, str) else f"expected a string, got {value!r}"
    if tp is Path:
        return None if isinstance(value, (str, Path)) else f"expected a path, got {value!r}"
    if isinstance(tp, type):
        return None if isinstance(value, tp) else f"expected {tp.__name__}, got {value!r}"
    return None


def _parameters(target: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """Parameters, their resolved type hints, and whether **kwargs is accepted."""
    signature = inspect.signature(target)
    hint_source = target.__init__ if inspect.isclass(target) and not dataclasses.is_dataclass(target) else target
    try:
        hints = typing.get_type_hints(hint_source, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to no type checks
        hints = {}
    params = {n: p for n, p in signature.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    var_kw = any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values())
    return params, hints, var_kw


def check_against_signature(node: dict, target: Any, key: str) -> None:
    """Keys of `node` bind to `target`'s signature: no unknown key, no missing one, right types."""
    params, hints, var_kw = _parameters(target)
    values = {k: v for k, v in node.items() if k not in HYDRA_KEYS}
    unknown = sorted(set(values) - set(params))
    if unknown and not var_kw:
        raise ConfigError(f"{key}.{unknown[0]}: unknown key for {_type_name(target)}; valid: {', '.join(params) or 'none'}")
    missing = [n for n, p in params.items() if p.default is p.empty and n not in values]
    if missing:
        raise ConfigError(f"{key}.{missing[0]}: missing key required by {_type_name(target)}")
    for name, value in values.items():
        tp = hints.get(name, Any)
        reason = type_error(value, tp)
        if reason:
            raise ConfigError(f"{key}.{name}: {reason}")
        if dataclasses.is_dataclass(tp) and isinstance(value, dict):
            check_against_signature(value, tp, f"{key}.{name}")


def check_targets(cfg: DictConfig) -> None:
    """Every node with a `_target_` imports and its keys bind to the target's signature."""
    container = OmegaConf.to_container(cfg, resolve=True)

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            if "_target_" in node:
                target = import_target(str(node["_target_"]), key)
                check_against_signature(node, target, key)
            for k, v in node.items():
                if k != "_target_":
                    walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{key}[{i}]")

    walk(container, "")


def check_schema(cfg: DictConfig, key: str, schema: type) -> None:
    """A config group that is plain data (model, hardware) matches its typed schema."""
    node = cfg.get(key)
    if not isinstance(node, DictConfig):
        raise ConfigError(f"{key}: missing config group; choose one with {key}=<option>")
    check_against_signature(OmegaConf.to_container(node, resolve=True), schema, key)


def resolve_all(cfg: DictConfig) -> None:
    """Interpolations resolve and no value is left `???`; an error names the key."""
    from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(f"{missing[0]}: missing value (???); set it with {missing[0]}=...")
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except InterpolationResolutionError as exc:
        raise ConfigError(f"{exc.full_key}: {str(exc).splitlines()[0]}") from None
    except MissingMandatoryValue as exc:
        raise ConfigError(f"{exc.full_key}: missing value; set it with {exc.full_key}=...") from None


def check_path_exists(path: str | None, key: str, what: str = "path", base: Path | None = None) -> None:
    """`path` exists; a relative one may also be relative to `base` (paths in conf/ are relative to the repo)."""
    if path is None:
        return
    candidate = Path(path).expanduser()
    if candidate.exists() or (base is not None and not candidate.is_absolute() and (base / candidate).exists()):
        return
    raise ConfigError(f"{key}: {what} {path!r} does not exist")


def adapter_attribute(target: str, attribute: str) -> Any:
    """A literal class attribute of an adapter (`name`, `trainers`), read from its source: nothing is imported."""
    module_name, _, class_name = target.rpartition(".")
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        return None
    for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for statement in node.body:
                targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
                if any(isinstance(t, ast.Name) and t.id == attribute for t in targets) and statement.value is not None:
                    return ast.literal_eval(statement.value)
    return None


def adapter_tasks(target: str) -> list[str]:
    return sorted(adapter_attribute(target, "trainers") or [])


def register_resolvers() -> None:
    """`${backend_name:<adapter _target_>}`: conf/backend/*.yaml derive `backend.name` from the adapter class;
    `${run_stamp:run}` / `${run_stamp:sweep}`: the unique part of a run or sweep dir's name; `${path_parts:a,b}`:
    names as flat parts of it, joined by `_` (Hydra makes the dir before any check runs: `model.name=Qwen/Qwen3-8B`
    nested it); `${sweep_parts:overrides,a,b}`: a sweep dir's, a swept name as the sweep's values."""
    if not OmegaConf.has_resolver("path_parts"):  # cached, as run_stamp: a sweep's jobs take the sweep's names
        OmegaConf.register_new_resolver("path_parts", path_parts, use_cache=True)
    if not OmegaConf.has_resolver("backend_name"):
        OmegaConf.register_new_resolver("backend_name", lambda target: adapter_attribute(target, "name"))
    if not OmegaConf.has_resolver("run_stamp"):  # unique run and sweep dir names (framework/core/rundir.py)
        from framework.core.rundir import run_stamp

        OmegaConf.register_new_resolver("run_stamp", run_stamp, use_cache=True)
    if not OmegaConf.has_resolver("sweep_parts"):  # a sweep dir's names, a swept one as its values; cached likewise
        from framework.core.rundir import sweep_parts

        OmegaConf.register_new_resolver("sweep_parts", sweep_parts, use_cache=True)


def backend_tasks(conf_dir: Path = CONF_DIR) -> dict[str, list[str]]:
    """{backend option: the tasks it runs} for every conf/backend/*.yaml (read without importing a backend)."""
    import yaml

    found = {}
    for path in sorted((conf_dir / "backend").glob("*.yaml")):
        target = ((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("adapter") or {}).get("_target_")
        found[path.stem] = adapter_tasks(target) if target else []
    return found


def check_task_settings(cfg: DictConfig) -> None:
    """`~sim`: a shipped task's settings node (conf/task/NAME.yaml's NAME) removed; the adapter read it as `Key 'sim'
    is not in struct`. A task without such a file (a test's or a plugin's) keeps its settings where it likes."""
    name = cfg.task.get("name")
    shipped = CONF_DIR / "task" / f"{name}.yaml"
    if name not in cfg and shipped.is_file() and name in (OmegaConf.to_container(OmegaConf.load(shipped)) or {}):
        raise ConfigError(f"{name}: missing; task={name} reads its settings there (conf/task/{name}.yaml); valid: "
                          f"keep it, and set its keys one at a time, {name}.KEY=VALUE")


def check_backend_runs_task(adapter: Any, backend_name: str, task: str) -> None:
    """The one check that a backend runs a task; the error names the backends that do."""
    if backend_name != adapter.name:
        raise ConfigError(f"backend.name: {backend_name!r} but its adapter {type(adapter).__name__} is "
                          f"{adapter.name!r}; they must agree")
    if task in adapter.trainers:
        return
    runs_it = [name for name, tasks in backend_tasks().items() if task in tasks]
    where = f"task={task} runs on backend={'|'.join(runs_it)}" if runs_it else f"no backend runs task={task} yet"
    raise ConfigError(f"task={task} does not run on backend={adapter.name} (it runs task="
                      f"{'|'.join(sorted(adapter.trainers))}); {where}")


def check_model_dir(path: str | None, key: str = "model.path") -> None:
    """A local model folder is a Hugging Face directory: config.json beside the weights and tokenizer."""
    if path is None:
        return
    folder = Path(path).expanduser()
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise ConfigError(f"{key}: {path!r} holds no config.json; give a Hugging Face model directory "
                          f"(config.json, weights, tokenizer files) or model.hub_id")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{key}: {path!r} is a file; give the Hugging Face model directory that holds it")
    if folder.is_dir():  # each backend reads it later, where a damaged one was an OSError or a TypeError
        read_config_json(folder / "config.json", key)


def read_config_json(path: Path, key: str = "model.path") -> dict:
    """A model folder's config.json as a dict; ConfigError naming `key` and the file when it is no JSON object."""
    import json

    try:
        config = json.loads(path.read_bytes())
    except (ValueError, OSError) as exc:  # not JSON, not UTF-8, unreadable
        config = exc
    if not isinstance(config, dict):
        what = f"not JSON ({config})" if isinstance(config, Exception) else f"a JSON {type(config).__name__}"
        raise ConfigError(f"{key}: {path} is {what}; valid: a Hugging Face config.json (one JSON object)")
    return config
