#!/usr/bin/env bash
# The simulator's speed against the issue's budgets: wall time and peak memory of
# `meshwork simulate` on the benchmark plans, median of N runs (default 3), with the
# 32-GPU NAR21 1.7B run as the baseline measured side by side (this machine is shared:
# compare ratios across days, not seconds).
#
# With a third argument, another build of meshwork is run alternately with the first, run by
# run, and the table adds its wall time and memory and the first's speed-up over it.
#
#   bench/sim_speed.sh [build/release/cli/meshwork] [runs] [other meshwork]
set -euo pipefail
bin="${1:-build/release/cli/meshwork}"
runs="${2:-3}"
other="${3:-}"
cd "$(dirname "$0")/.."
echo "this build: $("$bin" --version)"
[[ -n "$other" ]] && echo "against: $("$other" --version)"
plans=(
  "scenarios/published/nar21-1.7b.yaml|baseline: NAR21 1.7B, 32 GPUs|-"
  "scenarios/gpt3-175b-a100-1024.yaml|GPT-3 175B, 1,024 A100, TP8 PP8 DP16|1 s"
  "scenarios/published/nar21-1t.yaml|1T, 3,072 A100, TP8 PP64 DP6|5 s"
  "scenarios/heldout/llama3-405b-h100-16384.yaml|Llama-3-405B-shaped, 16,384 H100, TP8 PP16 DP128, pods 1:7|30 s, 4 GB"
  "scenarios/bench/llama3-405b-h100-16384-degraded.yaml|the same, one spine link at half rate, one GPU 10% slow|60 s"
  "scenarios/published/nar21-t2-175b-zero3-1536.yaml|NAR21 Table 2 175B ZeRO-3, 1,536 A100|5 min"
  "scenarios/bench/llama3-405b-h100-131072.yaml|the 16K plan with 1,024 replicas, 131,072 H100 (approximate: past the budget of played actors)|60 s, 8 GB"
)
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
# One run: "wall_s peak_kb" of `meshwork simulate PLAN --json` (the report kept for its
# actors); a run that fails stops the table rather than passing for a fast one.
one() {
  local t
  t=$(mktemp)
  if ! /usr/bin/time -o "$t" -f '%e %M' "$1" simulate "$2" --json > /tmp/sim_speed.json; then
    echo "sim_speed: $1 simulate $2 failed" >&2
    rm -f "$t"
    return 1
  fi
  cat "$t"
  rm -f "$t"
}
if [[ -n "$other" ]]; then
  printf '| plan | budget | wall (s), median of %s | peak RSS (MB) | ratio to baseline | played actors | other build: wall (s) | its peak RSS (MB) | speed-up |\n|---|---|---|---|---|---|---|---|---|\n' "$runs"
else
  printf '| plan | budget | wall (s), median of %s | peak RSS (MB) | ratio to baseline | played actors |\n|---|---|---|---|---|---|\n' "$runs"
fi
base=""
for entry in "${plans[@]}"; do
  IFS='|' read -r plan what budget <<<"$entry"
  walls=() other_walls=()
  rss=0 other_rss=0
  for ((i = 0; i < runs; i++)); do
    # Alternately: the other build first on even runs, this one first on odd runs.
    order=(this)
    if [[ -n "$other" ]]; then
      if ((i % 2 == 0)); then order=(other this); else order=(this other); fi
    fi
    for who in "${order[@]}"; do
      if [[ $who == this ]]; then out=$(one "$bin" "$plan"); else out=$(one "$other" "$plan"); fi
      read -r w k <<<"$out"
      if [[ $who == this ]]; then
        walls+=("$w")
        rss=$((k > rss ? k : rss))
        actors=$(python3 -c 'import json; print(json.load(open("/tmp/sim_speed.json")).get("played_actors", "?"))' 2>/dev/null || echo "?")
      else
        other_walls+=("$w")
        other_rss=$((k > other_rss ? k : other_rss))
      fi
    done
  done
  m=$(median "${walls[@]}")
  [[ -z "$base" ]] && base="$m"
  ratio=$(awk -v m="$m" -v b="$base" 'BEGIN {printf "%.1f", m / b}')
  if [[ -n "$other" ]]; then
    om=$(median "${other_walls[@]}")
    speedup=$(awk -v m="$m" -v o="$om" 'BEGIN {printf "%.2f", (m > 0 ? o / m : 0)}')
    printf '| %s | %s | %s | %d | %s | %s | %s | %d | %s |\n' "$what" "$budget" "$m" $((rss / 1024)) "$ratio" "$actors" "$om" $((other_rss / 1024)) "$speedup"
  else
    printf '| %s | %s | %s | %d | %s | %s |\n' "$what" "$budget" "$m" $((rss / 1024)) "$ratio" "$actors"
  fi
done
