#!/usr/bin/env bash
# How far the approximate play (past the budget of played actors, sim/symmetry.hpp) is from
# the exact one, on plans small enough to play exactly: each plan simulated with
# --max-played-actors 0 (exact) and 1 (one class per structure: the coarsest the budget
# allows), its step and the two largest communication terms of the breakdown.
#
#   bench/sim_approx.sh [build/release/cli/meshwork]
set -euo pipefail
bin="${1:-build/release/cli/meshwork}"
cd "$(dirname "$0")/.."
plans=(
  scenarios/gpt3-175b-a100-1024.yaml
  scenarios/published/nar21-1t.yaml
  scenarios/published/nar21-t2-530b-zero3-2240.yaml
  scenarios/heldout/llama3-405b-h100-8192.yaml
  scenarios/heldout/llama3-405b-h100-16384.yaml
  scenarios/bench/llama3-405b-h100-16384-degraded.yaml
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '| plan | played actors, exact / approximate | step (s), exact | approximate | difference | DP (s), exact / approximate | PP (s), exact / approximate | wall (s), exact / approximate |\n|---|---|---|---|---|---|---|---|\n'
for plan in "${plans[@]}"; do
  for budget in 0 1; do
    { /usr/bin/time -f "%e" "$bin" simulate "$plan" --json --max-played-actors "$budget" > "$tmp/$budget.json"; } 2> "$tmp/$budget.time"
  done
  python3 - "$plan" "$tmp" <<'PY'
import json, sys
plan, tmp = sys.argv[1], sys.argv[2]
e, a = (json.load(open(f"{tmp}/{b}.json")) for b in (0, 1))
we, wa = (open(f"{tmp}/{b}.time").read().split()[-1] for b in (0, 1))
se, sa = e["step_time_s"], a["step_time_s"]
be, ba = e["breakdown"], a["breakdown"]
print(f"| {plan.split('/')[-1][:-5]} | {e['played_actors']} / {a['played_actors']} | {se:.3f} | {sa:.3f} | {100 * (sa / se - 1):+.1f}% | "
      f"{be['dp_s']:.3f} / {ba['dp_s']:.3f} | {be['pp_s']:.3f} / {ba['pp_s']:.3f} | {we} / {wa} |")
PY
done
