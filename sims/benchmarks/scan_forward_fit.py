"""Fit the `xla` stack's `scanned_forward` (sims/stacks.yaml) from the xla calibration's prefill pairs, and check it.

    python -m sims.benchmarks.scan_forward_fit --fit R/h200_2026-11-28_s20_xla R/h200_2026-11-28_s20_xla15b \
        --check R/h100_2026-11-26_s10_xla2 R/h200_2026-11-28_s19_xla ...      # R = sims/benchmarks/results

Each calibration run (`xla_calibrate`, framework/backends/maxtext/benchmarks) times every model's first prefill
twice: as the backend runs it, its layers an `nn.scan` over stacked weights (a held-out case), and with the layers
called one by one on unstacked weights (`unrolled_prefill`, same logits). Their difference over the layers is what
the scan costs per layer; it is fitted, by least squares over the `--fit` runs' pairs, as copy_passes x the layer's
weight bytes at the card's peak memory bandwidth + layer_us (sims/scan_forward.py). Every run's pairs are then
predicted from the fit: the scan's per-layer cost, measured against predicted.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from framework.core.errors import ConfigError
from framework.core.paths import load_conf
from sims.builders import build_graph
from sims.hardware import hardware_spec
from sims.scan_forward import stage_layer_elements
from sims.workload import Layout

DTYPE_BYTES = {"bf16": 2, "fp32": 4}


def scan_pairs(run: Path) -> list[dict]:
    """A calibration run's scanned / unrolled prefill pairs: the scan's cost per layer, the layer's weight bytes per
    pass at the card's peak bandwidth (us)."""
    path = run / "accuracy.json"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: not a readable xla calibration record ({error})") from None
    hardware = load_conf("hardware", record["hardware"]["name"])["hardware"]
    bandwidth = hardware_spec({**hardware, "efficiency_table": None}).memory_bytes_per_s
    pairs = []
    for unrolled in record.get("unrolled_prefill", []):
        scanned = next(c for c in record["cases"] if c["model"] == unrolled["model"]
                       and c["workload"] == unrolled["workload"] and c["kind"] == "model")
        config = record["models"][unrolled["model"]]
        layers = config["num_hidden_layers"]
        elements = stage_layer_elements(build_graph(config, "prefill", "xla"), Layout(), 0, layers) / layers
        pairs.append({"run": run.name, "case": scanned["name"], "card": record["hardware"]["name"],
                      "scan_us": (scanned["time_us"] - unrolled["time_us"]) / layers,
                      "pass_us": elements * DTYPE_BYTES[record.get("dtype") or "bf16"] / bandwidth * 1e6})
    return pairs


def fit(pairs: list[dict]) -> tuple[float, float]:
    """(copy_passes, layer_us) minimising the squared error of the scan's per-layer cost."""
    basis = np.array([[p["pass_us"], 1.0] for p in pairs])
    (passes, layer_us), *_ = np.linalg.lstsq(basis, np.array([p["scan_us"] for p in pairs]), rcond=None)
    return float(passes), float(layer_us)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", nargs="+", type=Path, required=True, help="calibration runs to fit on")
    parser.add_argument("--check", nargs="*", type=Path, default=[], help="runs to check the fit on (held out)")
    args = parser.parse_args(argv)
    try:
        fitted = [p for run in args.fit for p in scan_pairs(run)]
        checked = [p for run in args.check for p in scan_pairs(run)]
    except ConfigError as error:  # a bad folder: one line, exit 2 (argparse's code for bad input)
        parser.exit(2, f"error: {error}\n")
    passes, layer_us = fit(fitted)
    print(f"copy_passes {passes:.3f}, layer_us {layer_us:.2f} (fitted on {len(fitted)} pairs)\n")
    print("| run | case | card | scan per layer, measured | predicted | error | in the fit |")
    print("|---|---|---|---|---|---|---|")
    for pair, used in [(p, True) for p in fitted] + [(p, False) for p in checked]:
        predicted = passes * pair["pass_us"] + layer_us
        print(f"| {pair['run']} | {pair['case']} | {pair['card']} | {pair['scan_us']:.1f} us | {predicted:.1f} us | "
              f"{(predicted - pair['scan_us']) / pair['scan_us']:+.1%} | {'yes' if used else 'no'} |")


if __name__ == "__main__":
    main()
