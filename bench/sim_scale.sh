#!/usr/bin/env bash
# The simulator from 1K to 131K GPUs (issue 21): wall time and peak memory of
# `meshwork simulate` on the Llama 3 405B plan of scenarios/heldout/llama3-405b-h100-16384.yaml
# with its data parallelism scaled (16 micro-batches per replica at every size; switch radix 64
# up to 65,536 GPUs, 128 above, as scenarios/bench/llama3-405b-h100-131072.yaml says why), one
# run each, exact (--max-played-actors 0) where that finishes within the timeout and with the
# default budget of played actors. The peak resident memory is the simulation process's
# (GNU time counts the children it waited for).
#
#   bench/sim_scale.sh [build/release/cli/meshwork] [timeout_s]
set -euo pipefail
bin="${1:-build/release/cli/meshwork}"
limit="${2:-600}"
cd "$(dirname "$0")/.."
base=scenarios/heldout/llama3-405b-h100-16384.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '| GPUs | DP | played actors (of TP groups) | exact: wall (s) | exact: peak RSS (MB) | default budget: wall (s) | peak RSS (MB) | step (s), exact | step (s), default |\n|---|---|---|---|---|---|---|---|---|\n'
for dp in 8 64 128 256 512 1024; do
  gpus=$((dp * 128))
  radix=64
  ((gpus > 65536)) && radix=128
  plan="$tmp/llama-$gpus.yaml"
  sed -e "s/num_gpus: 16384/num_gpus: $gpus/" -e "s/dp: 128/dp: $dp/" -e "s/global_batch_size: 2048/global_batch_size: $((dp * 16))/" \
      -e "s/switch_radix: 64/switch_radix: $radix/" "$base" > "$plan"
  run() {  # budget -> "wall rss step played" or "- - - -" past the timeout
    local out
    if out=$( { /usr/bin/time -f "TIME %e %M" timeout "$limit" "$bin" simulate "$plan" --json --max-played-actors "$1" > "$tmp/out.json"; } 2>&1 | grep '^TIME'); then
      python3 - "$tmp/out.json" "$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
_, wall, rss = sys.argv[2].split()
print(wall, int(rss) // 1024, f"{d['step_time_s']:.3f}", d["played_actors"])
PY
    else
      echo "- - - -"
    fi
  }
  read -r ew er es ep <<<"$(run 0)"
  read -r dw dr ds dpl <<<"$(run 2048)"
  printf '| %s | %s | %s / %s | %s | %s | %s | %s | %s | %s |\n' "$gpus" "$dp" "$dpl" "$((gpus / 8))" "$ew" "$er" "$dw" "$dr" "$es" "$ds"
done
