"""The decode-attention settings probe on CPU (interpreted): the model's current setting comes first and every
other setting computes the same attention."""

from framework.backends.maxtext.benchmarks.decode_attention_probe import main, settings
from framework.backends.maxtext.models.decode_attention import CACHE_BLOCK
from framework.backends.maxtext.models.prefix_cache import kernel_splits


def test_current_setting_first_and_grid_divides_the_cache():
    grid = settings(512, tiny=False)
    assert grid[0] == {"block_k": CACHE_BLOCK, "k_splits": kernel_splits(512), "num_warps": None, "num_stages": 2}
    assert all(512 % (s["block_k"] * s["k_splits"]) == 0 for s in grid)


def test_tiny_run_times_every_setting_with_equal_outputs():
    report = main(["--tiny", "--calls", "1"])
    timed = [s for s in report["settings"] if "us_per_layer" in s]
    assert len(timed) == len(settings(128, tiny=True)) and report["current"] == timed[0]
    assert all(s["max_abs_diff_vs_current"] < 1e-5 for s in timed)
