"""Fit the xla stack's `scanned_update.kept_byte_passes` (sims/stacks.yaml) from profiled GRPO updates, and check it.

    python -m framework.backends.maxtext.benchmarks.scan_kept_fit --fit DIR [DIR ...]    # update_probe --profile JSONs
    python -m framework.backends.maxtext.benchmarks.scan_kept_fit --check DIR [DIR ...]  # update_probe JSONs

Under a remat policy that keeps the GEMMs' outputs (`minimal`), the scanned update writes them into stacked buffers
in the forward and copies each layer's slice out in the backward: device-to-device copies (`memcpy32_post`,
`memcpy128` in a profile) that no kernel row holds. `--fit` takes those kernels' time per update from each profile
(`update_probe --remat minimal --profile`, the update without beta) and the bytes the simulator's kept outputs come
to for the same update, and solves least squares for the passes over those bytes at the card's peak bandwidth.
`--check` prints each update (beta 0) measured against the simulator's training phase with the shipped constants.
A report without a "remat" field (session 23's, before update_probe wrote it) ran remat minimal.
"""

from __future__ import annotations

import argparse
import glob
import json
import os

from framework.core.paths import load_conf

COPY_KERNELS = ("memcpy32_post", "memcpy128")


def _report(path: str) -> dict | None:
    """update_probe's JSON, or None for another probe's or a run that wrote none (out of memory: remat none at 64 rows
    of the 1.5B)."""
    text = open(path).read()
    report = json.loads(text[text.find("{"):]) if "{" in text else {}
    return report if "beta0" in report.get("ms", {}) else None


def predicted(report: dict) -> tuple[float, float, float]:
    """(training phase s, the scan's kept-output bytes per update, the card's peak bytes/s) the simulator gives the
    probe's update."""
    from framework.backends.maxtext.benchmarks.grpo_step import grpo_task
    from framework.backends.maxtext.trainers.preflight import train_workload
    from sims import simulate
    from sims.stacks import stack

    generations, mb = report.get("generations", 8), report["micro_batch"]  # session 23's calls: 16 x 8 rows
    task = grpo_task(argparse.Namespace(prompts=report["rows"] // generations, generations=generations, micro_batch=mb,
                                        prompt_tokens=report["prompt_tokens"], new_tokens=report["new_tokens"],
                                        dtype="bfloat16"))
    # the card update_probe ran with --hardware (older reports: read off the device name)
    name = report.get("hardware") or ("h200" if "H200" in report["device"] else "h100")
    hardware = load_conf("hardware", name)["hardware"]
    result = simulate(load_conf("model", report["model"])["hf_config"], hardware, {"tp": 1},
                      train_workload(task, mb, False, report.get("remat", "minimal")), stack="xla")
    scanned = stack("xla").scanned_update
    copied = sum(row["bytes"] for row in result.rows if row["name"] == "scan_copies")
    return result.latency_s, copied / scanned.kept_byte_passes, hardware["hbm_tb_s"] * 1e12


def fit(paths: list[str]) -> float:
    sums = [0.0, 0.0]
    for path in paths:
        if (report := _report(path)) is None:
            continue
        top = report["kernels"]["/device:GPU:0"]["top"]
        copy_s = sum(row[2] for row in top if row[0] in COPY_KERNELS) * 1e-6
        _, kept_bytes, bandwidth = predicted(report)
        one_pass_s = kept_bytes / bandwidth
        sums[0] += copy_s * one_pass_s
        sums[1] += one_pass_s ** 2
        print(f"{os.path.basename(path)}: copies {copy_s * 1e3:.1f} ms, kept {kept_bytes / 1e9:.1f} GB, "
              f"{copy_s / one_pass_s:.2f} passes")
    passes = sums[0] / sums[1]
    print(f"kept_byte_passes (least squares over the copies' time): {passes:.2f}")
    return passes


def check(paths: list[str]) -> None:
    for path in paths:
        if (report := _report(path)) is None:
            continue
        seconds, _, _ = predicted(report)
        measured = report["ms"]["beta0"] / 1e3
        print(f"{os.path.basename(path)}: measured {measured * 1e3:.1f} ms, predicted {seconds * 1e3:.1f} ms "
              f"({seconds / measured - 1:+.1%})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--fit", nargs="+", metavar="DIR")
    group.add_argument("--check", nargs="+", metavar="DIR")
    args = parser.parse_args(argv)
    folders = args.fit or args.check
    paths = sorted(p for folder in folders for p in glob.glob(f"{folder}/*.json") if _report(p) is not None)
    if not paths:
        parser.exit(2, f"error: no update_probe JSON under {' '.join(folders)}\n")
    fit(paths) if args.fit else check(paths)


if __name__ == "__main__":
    main()
