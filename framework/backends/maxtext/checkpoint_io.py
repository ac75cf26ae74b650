"""HF safetensors checkpoints <-> Flax params of models.Transformer.

Flax parameter paths mirror the HF names: layer i of `layers/self_attn/q_proj/kernel` (the layers
are scanned, so each layer parameter is stacked on a leading "layers" axis) is
`model.layers.<i>.self_attn.q_proj.weight`; kernels are the transposed HF weights, with the head
dimensions split out (q_proj: [hidden, heads, head_dim], o_proj: [heads, head_dim, hidden]).
Loading reads one parameter kind at a time (a layer parameter: that kind of every layer, stacked in
one host array) into host memory (read_hf_params: no device is touched), then places each array onto its
shards (place_params), so the full model never sits on one device.
"""

from __future__ import annotations

import json
import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import jax
import ml_dtypes
import numpy as np
from flax import linen as nn
from jax.sharding import Mesh

from framework.backends.maxtext.models.config import ModelConfig
from framework.backends.maxtext.models.transformer import Transformer, abstract_params
from framework.backends.maxtext.sharding import DEFAULT_RULES, LogicalRules, named_sharding
from framework.core.errors import CheckpointError, ConfigError, DataError

_NUMPY_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
_HF_LEAF_NAMES = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}
_COPIED_FILES = ("generation_config.json",)  # besides the tokenizer files


def hf_tensor_name(path: tuple[str, ...], layer: int | None = None) -> str:
    """`("layers", "self_attn", "q_proj", "kernel")`, layer 0 -> `"model.layers.0.self_attn.q_proj.weight"`."""
    leaf = _HF_LEAF_NAMES[path[-1]]
    if (path[0] == "layers") != (layer is not None):
        raise ValueError(f"hf_tensor_name: {'/'.join(path)} needs a layer index exactly when it is a layer parameter")
    if path[0] == "lm_head":
        return f"lm_head.{leaf}"
    modules = [f"layers.{layer}" if part == "layers" else part for part in path[:-1]]
    return ".".join(["model", *modules, leaf])


def per_layer(path: tuple[str, ...], box: nn.LogicallyPartitioned) -> tuple[int | None, tuple[int, ...], tuple]:
    """(number of stacked layers or None, shape and logical axes of one layer's tensor)."""
    shape, names = tuple(box.value.shape), tuple(box.names)
    if path[0] == "layers":
        return shape[0], shape[1:], names[1:]
    return None, shape, names


def hf_to_flax(tensor: np.ndarray, path: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
    """HF layout -> Flax layout: kernels are transposed ([out, in] -> [in, out]) and reshaped to the head layout."""
    if path[-1] == "kernel":
        tensor = tensor.T
    return tensor.reshape(shape)


def flax_to_hf(array: np.ndarray, path: tuple[str, ...], logical_axes: tuple[str, ...]) -> np.ndarray:
    """Inverse of hf_to_flax."""
    target = hf_shape(path, array.shape, logical_axes)
    if path[-1] == "kernel":
        return array.reshape(target[::-1]).T
    return array.reshape(target)


def hf_shape(path: tuple[str, ...], shape: tuple[int, ...], logical_axes: tuple[str, ...]) -> tuple[int, ...]:
    """Shape of the HF tensor behind a Flax param. A kernel's input dims are its first axis when that
    is `embed` (q/k/v, gate/up, lm_head), else all but the last (o_proj, down_proj)."""
    if path[-1] == "kernel":
        split = 1 if logical_axes[0] == "embed" else len(shape) - 1
        return math.prod(shape[split:]), math.prod(shape[:split])
    if path[-1] == "bias":
        return (math.prod(shape),)
    return tuple(shape)


def resolve_checkpoint_dir(model_dir_or_hub_id: str | Path) -> Path:
    """A local directory as is; otherwise a hub id, fetched (or found in the HF cache) by snapshot_download."""
    path = Path(model_dir_or_hub_id)
    if path.is_dir():
        return path
    if path.is_absolute() or str(model_dir_or_hub_id).startswith("."):
        raise DataError(f"{model_dir_or_hub_id}: model directory does not exist")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(model_dir_or_hub_id),
                                      allow_patterns=["*.safetensors", "*.json", "*.txt", "*.jinja", "*.model"]))
    except Exception as error:  # network, auth and missing-repo errors all mean the same to the user
        raise DataError(f"model {model_dir_or_hub_id!r}: not a local directory and snapshot_download failed "
                        f"({type(error).__name__}: {error})") from error


def load_hf_params(model_dir_or_hub_id: str | Path, config: ModelConfig, mesh: Mesh | None = None,
                   rules: LogicalRules | None = None, dtype: str | None = None) -> dict[str, Any]:
    """Flax params (the `params` collection) from HF safetensors, each tensor placed by the partition rules.

    `dtype` (float32/bfloat16) defaults to config.param_dtype. Without a mesh, tensors go to the
    default device. Raises CheckpointError when a tensor is missing or has the wrong shape.
    """
    return place_params(read_hf_params(model_dir_or_hub_id, config, dtype), config, mesh, rules)


def read_hf_params(model_dir_or_hub_id: str | Path, config: ModelConfig, dtype: str | None = None,
                   threads: int = 1) -> dict[str, Any]:
    """The params as host (numpy) arrays in the Flax layout and `dtype`: the CPU half of load_hf_params (reads,
    casts, transposes, stacks the layers), which touches no device (trainers/startup.py runs it during the
    compiles). `threads`: parameter kinds read side by side (NumPy's copies and casts release the GIL; the
    values are the same)."""
    checkpoint_dir = resolve_checkpoint_dir(model_dir_or_hub_id)
    target_dtype = _numpy_dtype(dtype or config.param_dtype)
    reader = _SafetensorsReader(checkpoint_dir)

    def read(path: tuple[str, ...], shape: tuple[int, ...], names: tuple, layer: int | None) -> np.ndarray:
        name = hf_tensor_name(path, layer)
        tensor = reader.get(name)
        expected = hf_shape(path, shape, names)
        if tuple(tensor.shape) != expected:
            raise CheckpointError(f"{checkpoint_dir}: tensor {name} has shape {tuple(tensor.shape)}, "
                                  f"the model config needs {expected}")
        return hf_to_flax(tensor, path, shape).astype(target_dtype, copy=False)

    def load(path: tuple[str, ...], box: nn.LogicallyPartitioned) -> np.ndarray:
        layers, shape, names = per_layer(path, box)
        if layers is None:
            return np.ascontiguousarray(read(path, shape, names, None))
        array = np.empty((layers, *shape), target_dtype)  # one parameter kind of every layer, filled in place
        for i in range(layers):
            array[i] = read(path, shape, names, i)
        return array

    boxed = abstract_params(Transformer(config))
    if threads <= 1:
        return _map_with_path(load, boxed)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="read-weights") as pool:
        futures = _map_with_path(lambda path, box: pool.submit(load, path, box), boxed)
    return jax.tree.map(lambda future: future.result(), futures)


def place_params(host: dict[str, Any], config: ModelConfig, mesh: Mesh | None = None,
                 rules: LogicalRules | None = None) -> dict[str, Any]:
    """Host params onto the devices, each by the partition rules (without a mesh: the default device). Each host
    array is dropped from `host` once placed, so the host holds at most the model once."""
    rules = rules or DEFAULT_RULES

    def place(path: tuple[str, ...], box: nn.LogicallyPartitioned) -> jax.Array:
        parent = _get_path(host, path[:-1])
        array = parent.pop(path[-1])
        if mesh is None:
            return jax.device_put(array)
        return jax.device_put(array, named_sharding(mesh, rules, box.names, array.shape))

    return _map_with_path(place, abstract_params(Transformer(config)))


def save_hf_checkpoint(params: dict[str, Any], config: ModelConfig, tokenizer_dir_or_obj: Any,
                       out_dir: str | Path, dtype: str | None = None) -> Path:
    """Write model.safetensors + config.json + tokenizer (+ generation_config.json) loadable by transformers.

    `tokenizer_dir_or_obj`: a directory (its tokenizer and generation_config.json are copied) or a
    tokenizer object with `save_pretrained`. `dtype` defaults to config.param_dtype.
    """
    from safetensors.numpy import save_file
    from transformers import AutoConfig

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = dtype or config.param_dtype
    target_dtype = _numpy_dtype(dtype)
    boxed = abstract_params(Transformer(config))
    tensors: dict[str, np.ndarray] = {}

    def collect(path: tuple[str, ...], box: nn.LogicallyPartitioned) -> None:
        array = np.asarray(jax.device_get(_get_path(params, path)))
        layers, _, names = per_layer(path, box)
        for layer in [None] if layers is None else range(layers):
            hf = flax_to_hf(array if layer is None else array[layer], path, names).astype(target_dtype, copy=False)
            tensors[hf_tensor_name(path, layer)] = np.ascontiguousarray(hf)

    _map_with_path(collect, boxed)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})

    hf_fields = {k: v for k, v in config.hf_config.items() if k not in ("torch_dtype", "dtype", "transformers_version")}
    hf_config = AutoConfig.for_model(**hf_fields)
    hf_config.dtype = dtype
    hf_config.save_pretrained(out_dir)
    _save_tokenizer(tokenizer_dir_or_obj, out_dir)
    return out_dir


def _save_tokenizer(tokenizer_dir_or_obj: Any, out_dir: Path) -> None:
    if hasattr(tokenizer_dir_or_obj, "save_pretrained"):
        tokenizer_dir_or_obj.save_pretrained(out_dir)
        return
    from transformers import AutoTokenizer

    source = resolve_checkpoint_dir(tokenizer_dir_or_obj)
    AutoTokenizer.from_pretrained(source).save_pretrained(out_dir)
    for name in _COPIED_FILES:
        if (source / name).is_file() and source.resolve() != out_dir.resolve():
            shutil.copyfile(source / name, out_dir / name)


def _numpy_dtype(name: str) -> np.dtype:
    if name not in _NUMPY_DTYPES:
        raise ConfigError(f"checkpoint dtype: {name!r} is not one of {', '.join(_NUMPY_DTYPES)}")
    return _NUMPY_DTYPES[name]


def _map_with_path(fn, boxed: Any) -> Any:
    """Apply fn(path_of_names, box) to every LogicallyPartitioned leaf, keeping the tree structure."""
    return jax.tree_util.tree_map_with_path(
        lambda key_path, box: fn(tuple(k.key for k in key_path), box), boxed,
        is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))


def _get_path(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if key not in tree:
            raise CheckpointError(f"params: no entry {'/'.join(path)}; the params do not match the model config")
        tree = tree[key]
    return tree


class _SafetensorsReader:
    """Access to the tensors of one or more safetensors files (several via model.safetensors.index.json)."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.handles: dict[Path, Any] = {}
        self.location = dict(self._weight_map())

    def _weight_map(self) -> Iterator[tuple[str, Path]]:
        index = self.checkpoint_dir / "model.safetensors.index.json"
        if index.is_file():
            for name, filename in json.loads(index.read_text())["weight_map"].items():
                yield name, self.checkpoint_dir / filename
            return
        single = self.checkpoint_dir / "model.safetensors"
        if not single.is_file():
            raise CheckpointError(f"{self.checkpoint_dir}: no model.safetensors or model.safetensors.index.json")
        for name in self._handle(single).keys():
            yield name, single

    def _handle(self, path: Path) -> Any:
        if path not in self.handles:
            from safetensors import safe_open

            self.handles[path] = safe_open(str(path), framework="numpy")
        return self.handles[path]

    def get(self, name: str) -> np.ndarray:
        if name not in self.location:
            raise CheckpointError(f"{self.checkpoint_dir}: tensor {name} is missing; does the checkpoint match "
                                  f"the model config (tie_word_embeddings, biases, qk-norm)?")
        return self._handle(self.location[name]).get_tensor(name)
