"""Median first-pass and repeated configurations/s over base_N.txt and after_N.txt (python medians.py DIR)."""
import pathlib, statistics, sys

folder = pathlib.Path(sys.argv[1])


def read(prefix):
    runs = {}
    for path in sorted(folder.glob(f"{prefix}_*.txt")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 5 and parts[1] in ("prefill", "decode", "train"):
                runs.setdefault((parts[0], parts[1]), []).append((float(parts[2]), float(parts[4])))
    return runs


base, after = read("base"), read("after")
print(f"{'model':<18} {'mode':<8} {'first pass before -> after (median)':>36} {'repeated before -> after':>26} runs")
for key in base:
    first = [statistics.median(r[1] for r in runs[key]) for runs in (base, after)]
    repeated = [statistics.median(r[0] for r in runs[key]) for runs in (base, after)]
    print(f"{key[0]:<18} {key[1]:<8} {first[0]:>15,.0f} -> {first[1]:>7,.0f} ({first[1] / first[0]:.2f}x) "
          f"{repeated[0]:>11,.0f} -> {repeated[1]:>7,.0f}  {len(base[key])}/{len(after[key])}")

harness = {prefix: {} for prefix in ("base", "after")}
for prefix, runs in harness.items():
    for path in sorted(folder.glob(f"harness_{prefix}_*.txt")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 8 and parts[1] in ("prefill", "decode", "train"):
                runs.setdefault((parts[0], parts[1]), []).append(float(parts[4]))
if harness["base"]:
    print(f"\nfirst_pass_harness.py (median over runs of each run's median of 15 passes), us/config before -> after")
    for key, values in harness["base"].items():
        before, after = statistics.median(values), statistics.median(harness["after"][key])
        print(f"{key[0]:<18} {key[1]:<8} {before:7.1f} -> {after:7.1f} ({before / after:.2f}x; {1e6 / after:,.0f} configs/s)")
