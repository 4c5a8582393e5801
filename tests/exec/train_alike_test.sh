#!/usr/bin/env bash
# Two meshes of one model and global batch train alike: they run 4 steps from the same initial
# parameters and data, and their losses agree at every step to 1e-5 (the reductions' order
# differs, so not bit for bit). --verify re-syncs its reference to the run's parameters every
# step, so it checks gradients, not the update; this checks whole steps, the update included
# (ZeRO's reduce-scatter, AdamW on each shard and the all-gather, for dense and expert
# parameters alike; CP's split of the sequence with its DP x CP reduction).
# Usage: train_alike_test.sh MPIEXEC MESHWORK PLAN_A PLAN_B WORKDIR
set -uo pipefail
mpiexec=$1 meshwork=$2 a=$3 b=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$mpiexec" --oversubscribe -np 4 "$meshwork" execute "$a" --steps 4 > "$work/a.out" 2>&1 || fail "$a: $(cat "$work/a.out")"
"$mpiexec" --oversubscribe -np 4 "$meshwork" execute "$b" --steps 4 > "$work/b.out" 2>&1 || fail "$b: $(cat "$work/b.out")"
for s in 1 2 3 4; do
  la=$(grep -E -o "^step $s  loss [0-9.]+" "$work/a.out" | awk '{print $4}')
  lb=$(grep -E -o "^step $s  loss [0-9.]+" "$work/b.out" | awk '{print $4}')
  [ -n "$la" ] && [ -n "$lb" ] || fail "step $s: no loss ($(cat "$work/a.out" "$work/b.out"))"
  awk -v x="$la" -v y="$lb" 'BEGIN { d = x - y; if (d < 0) d = -d; exit !(d <= 1e-5 * y) }' || fail "step $s: loss $la ($a) against $lb ($b)"
  echo "step $s: $la and $lb"
done
echo "the two plans train alike over 4 steps"
