"""The vocabulary head's timing (benchmarks/xla_vocab.py) on the CPU: the records the xla table takes add up to the
head as the update runs it, and the timed head is the update's own function."""

import json

import jax
import jax.numpy as jnp
import pytest

from framework.backends.maxtext.benchmarks import xla_vocab
from framework.backends.maxtext.benchmarks.xla_calibrate import model_config
from framework.backends.maxtext.benchmarks.xla_kernels import XlaKernels
from framework.backends.maxtext.models.vocab_projection import reference_log_probs


@pytest.fixture(scope="module")
def tiny_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab")
    xla_vocab.main(["--tiny", "--out", str(out)])
    return json.loads((out / "vocab_microbench.json").read_text())


def test_the_lm_head_and_log_softmax_records_add_up_to_the_timed_head(tiny_records):
    by_batch = {}
    for record in tiny_records:
        by_batch.setdefault(record["batch"], {})[record["benchmark"]] = record
    assert set(by_batch) == set(xla_vocab.TINY["models"][0][1])
    for records in by_batch.values():
        us = records["lm_head"]["timed_us"]
        assert records["lm_head"]["time_us"] == us["gemm"]
        assert records["lm_head_forward_backward"]["time_us"] == pytest.approx(us["gemm_vjp"] + us["gemm"])
        forward = records["lm_head"]["time_us"] + records["cross_entropy"]["time_us"]
        both = records["lm_head_forward_backward"]["time_us"] + records["cross_entropy_forward_backward"]["time_us"]
        assert forward == pytest.approx(us["head"])
        assert both == pytest.approx(us["head_vjp"])
        assert {"lm_head_backward", "cross_entropy_backward"} <= set(records)  # derive_backward paired them
        assert records["lm_head"]["m"] == records["lm_head"]["tokens"] == records["lm_head"]["batch"] * 8


def test_the_timed_head_is_the_updates_chunked_log_probs_with_its_gradient():
    kernels = XlaKernels(model_config("tiny_qwen2", 1), "float32", "cpu")
    benches = xla_vocab.head_benches(kernels, 2, 4)
    x, params, targets = benches["head"].make_args()
    assert x.shape[1] == xla_vocab.CHUNKS * 4
    log_probs, _ = benches["head"].fn(x, params, targets)
    kernel = params["embed_tokens"]["embedding"].T
    expected, _ = reference_log_probs(x, kernel, targets, 1.0)
    assert jnp.allclose(log_probs, expected, atol=1e-5)
    x, params, targets, cotangents = benches["head_vjp"].make_args()
    _, (d_x, _) = benches["head_vjp"].fn(x, params, targets, cotangents)
    kernel = params["embed_tokens"]["embedding"].T
    expected = jax.vjp(lambda h: reference_log_probs(h, kernel, targets, 1.0)[0], x)[1](cotangents[0])[0]
    assert jnp.allclose(d_x, expected, atol=1e-5)


def test_the_head_bench_calls_the_updates_function_over_two_chunks(monkeypatch):
    # equal values cannot tell the update's chunked head from the plain formula: the bench must go through
    # update.chunked_log_probs, with `chunk` positions a chunk (one chunk let XLA share the logits GEMM)
    from framework.backends.maxtext.trainers import update

    calls, original = [], update.chunked_log_probs

    def spy(hidden, kernel, targets, temperature, chunk_size, layout):
        calls.append((hidden.shape[1], chunk_size))
        return original(hidden, kernel, targets, temperature, chunk_size, layout)

    monkeypatch.setattr(update, "chunked_log_probs", spy)
    kernels = XlaKernels(model_config("tiny_qwen2", 1), "float32", "cpu")
    bench = xla_vocab.head_benches(kernels, 2, 4)["head"]
    bench.fn(*bench.make_args())
    assert calls == [(xla_vocab.CHUNKS * 4, 4)]


def test_a_head_timed_not_above_its_gemms_records_no_log_softmax(monkeypatch):
    # session 24 call A: over one chunk XLA shared the logits GEMM with the backward's recompute and the head's vjp
    # came out below the GEMMs'; a clamped 0 (or a negative time) must not enter the table as a log-softmax
    from framework.backends.maxtext.benchmarks.xla_calibrate import hardware_named
    from framework.backends.maxtext.benchmarks.xla_kernels import LoopTiming

    canned = {"gemm": 10.0, "gemm_vjp": 30.0, "head": 15.0, "head_vjp": 35.0}  # 35 < 30 + 10: no backward left

    class CannedTimer:
        def time(self, bench, bytes_touched, estimate_s, target_s=None):
            name = next(n for n, b in benches.items() if b is bench)
            return LoopTiming(canned[name] * (xla_vocab.CHUNKS if name.startswith("head") else 1), 0.0, 1, 1, 0.0)

    kernels = XlaKernels(model_config("tiny_qwen2", 1), "float32", "cpu")
    benches = xla_vocab.head_benches(kernels, 1, 8)
    monkeypatch.setattr(xla_vocab, "head_benches", lambda *_args: benches)
    lines = []

    def records():
        return xla_vocab.chunk_records(kernels, model_config("tiny_qwen2", 1), hardware_named("cpu", "cpu", True),
                                       1, 8, "fp32", CannedTimer(), lines.append)

    assert [r["benchmark"] for r in records()] == ["lm_head", "lm_head_forward_backward"]
    assert "log-softmax records left out" in lines[-1]
    canned["head_vjp"] = 50.0  # above the GEMMs: all four, the sums the measured head
    assert [r["time_us"] for r in records()] == [10.0, 40.0, 5.0, 10.0]
