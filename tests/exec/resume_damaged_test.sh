#!/usr/bin/env bash
# Resuming from damaged checkpoint directories (issue 25): a damaged `latest`, a truncated
# newest shard, a missing shard, a checksum mismatch and a rank killed while saving each
# resume from the newest complete checkpoint with a warning naming what was skipped, bit for
# bit as the uninterrupted run; damaged checkpoints are renamed aside, never deleted; a
# directory with no valid checkpoint stops the job and changes nothing; a run without
# --resume refuses a directory that holds checkpoints; --keep-last N keeps N.
# Usage: resume_damaged_test.sh MPIEXEC MESHWORK PLAN WORKDIR
set -uo pipefail
mpiexec=$1 meshwork=$2 plan=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
run() { "$mpiexec" --oversubscribe -np 4 "$meshwork" execute "$plan" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
# "step N  loss X (HEX)" of a run's output.
loss_line() { grep -E -o "^step $1  loss [^ ]+ \([^)]+\)" "$2"; }
same_steps() {  # OUTPUT STEP...: those steps' losses equal the uninterrupted run's, bit for bit
  local out=$1; shift
  for s in "$@"; do
    a=$(loss_line "$s" "$work/whole.out"); b=$(loss_line "$s" "$out")
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $s: uninterrupted '$a', resumed '$b' ($out)"
  done
}
shard() { printf '%s/step-%08d/rank-%05d.ckpt' "$1" "$2" "$3"; }

run --steps 6 > "$work/whole.out" 2>&1 || fail "uninterrupted run: $(cat "$work/whole.out")"
run --steps 4 --checkpoint-dir "$work/base" --checkpoint-every 2 > "$work/base.out" 2>&1 || fail "checkpointed run: $(cat "$work/base.out")"
same_steps "$work/base.out" 1 2 3 4

# CASE DAMAGE EXPECTED_FROM WARNING: damage a copy of base, resume two steps, check.
check_case() {
  local name=$1 damage=$2 from=$3 warning=$4 d="$work/$1"
  cp -r "$work/base" "$d"
  eval "$damage"
  run --steps 2 --checkpoint-dir "$d" --resume > "$d.out" 2> "$d.err" || fail "$name: resume failed: $(cat "$d.out" "$d.err")"
  grep -q "resuming from the checkpoint of step $from" "$d.out" || fail "$name: did not resume from step $from: $(cat "$d.out" "$d.err")"
  grep -q -- "$warning" "$d.err" || fail "$name: no warning '$warning': $(cat "$d.err")"
  same_steps "$d.out" $((from + 1)) $((from + 2))
  echo "ok: $name resumes from step $from"
}
check_case damaged-latest 'printf "4x\n" > "$d/latest"' 4 "latest holds \"4x"
check_case truncated-shard 'truncate -s 100 "$(shard "$d" 4 1)"' 2 "rank 1: checkpoint of step 4 skipped: .*checksum mismatch"
check_case missing-shard 'rm "$(shard "$d" 4 3)"' 2 "rank 3: checkpoint of step 4 skipped: .*no checkpoint shard"
check_case checksum-mismatch 'printf "\x7f" | dd of="$(shard "$d" 4 2)" bs=1 seek=200 conv=notrunc status=none' 2 "the shard of rank 2)"
# Damaged checkpoints are set aside with their files, not deleted.
[ -f "$(shard "$work/truncated-shard" 4 1 | sed 's|step-00000004|step-00000004.damaged|')" ] || fail "the truncated shard was not kept in step-00000004.damaged"
[ -f "$work/damaged-latest/latest.damaged" ] || fail "the damaged latest was not set aside"
grep -q "^2$" "$work/truncated-shard/latest" || fail "latest does not name the step resumed from: $(cat "$work/truncated-shard/latest")"

# A rank killed halfway through its shard of step 4.
run --steps 4 --checkpoint-dir "$work/killed" --checkpoint-every 2 --inject-save-death 4:1 > "$work/killed.out" 2>&1 && fail "a run killed in its save exited 0"
[ -f "$(shard "$work/killed" 4 1).tmp" ] || fail "the interrupted save left no temporary shard"
run --steps 2 --checkpoint-dir "$work/killed" --resume > "$work/killed-resume.out" 2> "$work/killed-resume.err" || fail "resume after a killed save: $(cat "$work/killed-resume.err")"
grep -q "resuming from the checkpoint of step 2" "$work/killed-resume.out" || fail "killed save: $(cat "$work/killed-resume.out" "$work/killed-resume.err")"
grep -q "rank 1: checkpoint of step 4 skipped" "$work/killed-resume.err" || fail "killed save: no warning: $(cat "$work/killed-resume.err")"
same_steps "$work/killed-resume.out" 3 4
echo "ok: a save killed halfway resumes from step 2"

# No valid checkpoint: the job stops, nothing is renamed.
cp -r "$work/base" "$work/none"
truncate -s 10 "$(shard "$work/none" 2 0)" "$(shard "$work/none" 4 0)"
run --steps 2 --checkpoint-dir "$work/none" --resume > "$work/none.out" 2>&1 && fail "resuming with no valid checkpoint exited 0"
grep -q "holds checkpoints (steps 4, 2) and none is valid" "$work/none.out" || fail "no valid checkpoint: $(cat "$work/none.out")"
[ -d "$work/none/step-00000004" ] && [ -d "$work/none/step-00000002" ] && ! ls "$work/none" | grep -q damaged || fail "no valid checkpoint: the directory changed: $(ls "$work/none")"
echo "ok: no valid checkpoint stops the job and changes nothing"

# A fresh run does not write over checkpoints.
run --steps 2 --checkpoint-dir "$work/base" --checkpoint-every 1 > "$work/overwrite.out" 2>&1 && fail "a fresh run into a checkpoint directory exited 0"
grep -q "already holds checkpoints (newest step 4): pass --resume" "$work/overwrite.out" || fail "overwrite: $(cat "$work/overwrite.out")"
echo "ok: a fresh run refuses a directory with checkpoints"

# Retention.
run --steps 4 --checkpoint-dir "$work/keep" --checkpoint-every 1 --keep-last 2 > "$work/keep.out" 2>&1 || fail "--keep-last: $(cat "$work/keep.out")"
[ "$(ls "$work/keep" | tr '\n' ' ')" = "latest step-00000003 step-00000004 " ] || fail "--keep-last 2 left: $(ls "$work/keep")"
echo "ok: --keep-last 2 keeps steps 3 and 4"
