"""The decode-attention probe on CPU (interpreted): every setting of every shape is timed and computes the same
attention as the kernel in one part."""

from framework.backends.maxtext.benchmarks.decode_attention_probe import SETTINGS, TINY, main


def test_tiny_run_times_every_setting_with_equal_outputs():
    report = main(["--tiny"])
    assert [(s["rows"], s["live_to"]) for s in report["shapes"]] == list(TINY["shapes"])
    for shape in report["shapes"]:
        assert list(shape["settings"]) == [str(s) for s in SETTINGS]
        assert all("us" in s for s in shape["settings"].values()), shape
        diffs = [s["max_abs_diff_vs_parts_1"] for s in shape["settings"].values()]
        assert max(diffs) < 1e-5 and shape["best"] in shape["settings"]
