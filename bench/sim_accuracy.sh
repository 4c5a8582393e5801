#!/usr/bin/env bash
# The simulator (or, with TIER=estimate, the closed form) against published runs
# (docs/reference/published-runs.md A1, A2): each scenario run with `meshwork simulate --json`, the published figure read from the
# scenario's description ("measured N TFLOP/s" counts recomputation, as NAR21 does: HFU;
# "MFU N%" is KOR22's). Prints a Markdown table with wall time per case.
#
#   bench/sim_accuracy.sh [build/release/cli/meshwork] scenario.yaml...
#   TIER=estimate bench/sim_accuracy.sh [build/release/cli/meshwork] scenario.yaml...
set -euo pipefail
bin="${1:-build/release/cli/meshwork}"
shift || true
printf '| scenario | published | %s | error | step (s) | wall (s) |\n|---|---|---|---|---|---|\n' "${TIER:-simulate}d"
for f in "$@"; do
  desc=$(grep -m1 '^description:' "$f")
  start=$(date +%s.%N)
  tier=${TIER:-simulate}
  extra=()
  [ "$tier" = simulate ] && extra=(--ignore-memory)  # the estimate prices a plan that does not fit; exit 3 says so
  json=$("$bin" "$tier" "$f" --json "${extra[@]}" 2>/dev/null || true)
  wall=$(echo "$(date +%s.%N) - $start" | bc)
  python3 - "$f" "$desc" "$json" "$wall" <<'PY'
import json, re, sys
f, desc, text, wall = sys.argv[1:5]
r = json.loads(text)
m = re.search(r"measured ([0-9.]+) TFLOP", desc)
if m:
    pub, sim, unit = float(m.group(1)), r["tflops_per_gpu"]["hardware"], "TFLOP/s"
else:
    m = re.search(r"MFU ([0-9.]+)%", desc) or re.search(r"([0-9.]+)% MFU", desc)
    pub, sim, unit = float(m.group(1)), r["mfu"] * 100, "% MFU"
name = f.split("/")[-1].removesuffix(".yaml")
print(f"| {name} | {pub:g} {unit} | {sim:.1f} | {100 * (sim / pub - 1):+.1f}% | {r['step_time_s']:.2f} | {float(wall):.1f} |")
PY
done
