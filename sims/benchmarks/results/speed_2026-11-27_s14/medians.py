"""Median first-pass and repeated configurations/s over base_N.txt, after_N.txt and single_N.txt (python medians.py DIR):
base = the branch point's benchmark (one simulate per layout), after = simulate_many, single = this code, one
simulate call per layout (--per-layout)."""
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


base, after, single = read("base"), read("after"), read("single")
print(f"{'model':<18} {'mode':<8} {'first pass: base -> simulate_many':>34} {'per-layout':>11} "
      f"{'repeated: base -> many, per-layout':>36} runs")
for key in base:
    first = [statistics.median(r[1] for r in runs[key]) for runs in (base, after, single)]
    repeated = [statistics.median(r[0] for r in runs[key]) for runs in (base, after, single)]
    print(f"{key[0]:<18} {key[1]:<8} {first[0]:>13,.0f} -> {first[1]:>7,.0f} ({first[1] / first[0]:.2f}x) {first[2]:>11,.0f} "
          f"{repeated[0]:>15,.0f} -> {repeated[1]:>7,.0f}, {repeated[2]:>7,.0f}  {len(base[key])}/{len(after[key])}/{len(single[key])}")

harness = {prefix: {} for prefix in ("base", "after")}
for prefix, runs in harness.items():
    for path in sorted(folder.glob(f"harness_{prefix}_*.txt")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 8 and parts[1] in ("prefill", "decode", "train"):
                runs.setdefault((parts[0], parts[1]), []).append((float(parts[6]), parts[8]))
if harness["base"]:
    print("\nfirst_pass_harness.py (median over runs of each run's median of 15 first passes), us/config: base per-layout "
          "-> this code per-layout, simulate_many")
    for key, values in harness["base"].items():
        base = statistics.median(v[0] for v in values)
        single = statistics.median(v[0] for v in harness["after"][key])
        many = statistics.median(float(v[1]) for v in harness["after"][key])
        print(f"{key[0]:<18} {key[1]:<8} {base:7.1f} -> {single:7.1f} ({single / base:.2f}x), {many:7.1f} "
              f"({base / many:.2f}x faster; {1e6 / many:,.0f} configs/s)")
