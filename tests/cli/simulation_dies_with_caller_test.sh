#!/usr/bin/env bash
# A simulation killed from outside (a timeout, Ctrl-C) takes its simulation process with it:
# the forked child must not run on for minutes after its caller has gone.
# The child ends by itself at its next progress line (a closed pipe): the plan should be one
# whose set-up alone takes longer than this test waits (131,072 GPUs played exactly).
# Usage: simulation_dies_with_caller_test.sh MESHWORK PLAN [SIMULATE-OPTIONS...]
set -uo pipefail
meshwork=$1 plan=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# A name of our own, so that pgrep finds this test's processes and no other's.
mine="$dir/dies-with-caller-$$.yaml"
cp "$plan" "$mine"
"$meshwork" simulate "$mine" "$@" > /dev/null 2>&1 &
caller=$!
# Until the simulation process has started: the caller's child.
child=""
for _ in $(seq 100); do
  child=$(pgrep -P "$caller" | head -1)
  [ -n "$child" ] && break
  sleep 0.1
done
if [ -z "$child" ] || ! kill -0 "$child" 2> /dev/null; then
  echo "FAIL: the simulation process never started (or ended at once)"
  kill -KILL "$caller" 2> /dev/null
  exit 1
fi
kill -TERM "$caller"
wait "$caller" 2> /dev/null
for _ in $(seq 50); do
  if ! kill -0 "$child" 2> /dev/null; then
    echo "ok: the simulation process $child ended with its caller"
    exit 0
  fi
  sleep 0.1
done
echo "FAIL: the simulation process $child still runs 5 s after its caller was killed"
kill -KILL "$child"
exit 1
