"""Session 23's GPU probes run on CPU with --tiny (a check of the scripts, not of any figure): each times every
variant its docstring names and records what scan_kept_fit and the docs read from its report."""

from framework.backends.maxtext.benchmarks import logprob_probe, power_probe, update_probe


def test_logprob_probe_times_the_pass_and_its_parts():
    report = logprob_probe.main(["--tiny", "--steps", "1", "--warmup", "1"])
    assert set(report["ms"]) == {"full", "full_bf16", "full_padded", "hidden"}
    assert all(ms > 0 for ms in report["ms"].values()) and report["chunk"] == 128


def test_update_probe_times_the_update_with_and_without_beta_and_on_zero_advantages():
    report = update_probe.main(["--tiny", "--steps", "1", "--warmup", "1", "--zero-advantages"])
    assert set(report["ms"]) == set(report["dispatch_ms"]) == {"beta0", "beta", "beta0_zero"}
    assert report["remat"] == "none" and report["micro_batch"] == 4  # what scan_kept_fit predicts the update from


def test_power_probe_reads_bursts_and_a_sustained_run_on_random_and_zero_operands():
    report = power_probe.main(["--tiny"])
    assert set(report["ms"]) == {f"{data}_{kind}" for data in ("random", "zeros")
                                 for kind in ("burst", "sustained_last_second")}
    assert all(report["sustained_ms"][data] for data in ("random", "zeros"))


def test_a_kernel_name_two_programs_source_differently_is_marked_not_taken_from_the_last():
    update = {"loop_multiply_fusion": "bf16[64,512,8960]  jit(_accumulate)/mlp/mul", "gemm_fusion_dot_15": "up_proj"}
    log_probs = {"loop_multiply_fusion": "bf16[64,512,8960]  jit(_log_probs)/mlp/mul", "gemm_fusion_dot_15": "up_proj"}
    merged = update_probe.merged_sources([update, log_probs])
    assert merged == {"loop_multiply_fusion": update_probe.AMBIGUOUS, "gemm_fusion_dot_15": "up_proj"}


def test_logprob_probe_predicts_the_float32_pass_with_its_casts_and_the_bfloat16_one_without():
    """`full` is the pass on float32 master weights (workload param_dtype fp32: the scan's float32 slices, the head
    cast per chunk, the tied head's transpose), `full_bf16` the same on bfloat16 weights, as the variants time them."""
    from framework.backends.maxtext.benchmarks.shapes import parse_args

    args = parse_args("logprob", ["--model", "qwen2_5_0_5b_instruct", "--hardware", "h200", "--micro-batch", "16"],
                      logprob_probe.EXTRA)
    predicted = logprob_probe.predictions(args)
    assert predicted["full"] > predicted["full_bf16"] > predicted["hidden"] > 0
    assert predicted["rows_ms"]["head_weight_cast"] > 0 and predicted["rows_ms"]["head_weight_transpose"] > 0
