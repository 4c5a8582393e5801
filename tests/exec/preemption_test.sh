#!/usr/bin/env bash
# Preemption (issue 25): one rank of an `mpirun -np 2` run gets SIGTERM during step 2; the job
# writes a checkpoint at the end of that step, exits with status 75 (preempted), and --resume
# continues bit for bit as the uninterrupted run.
# Usage: preemption_test.sh MPIEXEC MESHWORK PLAN WORKDIR
set -uo pipefail
mpiexec=$1 meshwork=$2 plan=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
run() { "$mpiexec" --oversubscribe -np 2 "$meshwork" execute "$plan" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
loss_line() { grep -E -o "^step $1  loss [^ ]+ \([^)]+\)" "$2"; }

run --steps 4 > "$work/whole.out" 2>&1 || fail "uninterrupted run: $(cat "$work/whole.out")"
run --steps 4 --checkpoint-dir "$work/ckpt" --inject-signal 2:1 > "$work/pre.out" 2> "$work/pre.err"
rc=$?
[ "$rc" -eq 75 ] || fail "preempted run exited $rc, not 75: $(cat "$work/pre.out" "$work/pre.err")"
grep -q "rank 1: SIGTERM received: stopping at the end of step 2" "$work/pre.err" || fail "no notice: $(cat "$work/pre.err")"
grep -q "preempted: the checkpoint of step 2 is in" "$work/pre.err" || fail "no checkpoint named: $(cat "$work/pre.err")"
loss_line 3 "$work/pre.out" && fail "the preempted run went on past step 2"
grep -q "^2$" "$work/ckpt/latest" || fail "latest: $(cat "$work/ckpt/latest")"
run --steps 2 --checkpoint-dir "$work/ckpt" --resume > "$work/resumed.out" 2>&1 || fail "resume: $(cat "$work/resumed.out")"
for s in 3 4; do
  a=$(loss_line $s "$work/whole.out"); b=$(loss_line $s "$work/resumed.out")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $s: uninterrupted '$a', resumed '$b'"
done
echo "ok: preempted at step 2 (exit 75), resumed bit-exactly"
