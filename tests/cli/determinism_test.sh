#!/usr/bin/env bash
# Determinism (issue 25): a scenario's --json Reports from estimate, simulate and reliability
# (16 trials, the plan's seed) are byte for byte the committed ones, provenance's version and
# commit aside. The committed Reports were written by another run (and build) of the same
# code, so this checks run to run with one simulation per scenario; a change that moves a
# figure on purpose rewrites them: MESHWORK_UPDATE_GOLDEN=1 ctest -R determinism.
# Usage: determinism_test.sh MESHWORK SCENARIO GOLDEN_STEM
set -uo pipefail
meshwork=$1 scenario=$2 stem=$3
mkdir -p "$(dirname "$stem")"
status=0
for cmd in estimate simulate reliability; do
  args=("$cmd" "$scenario" --json)
  [ "$cmd" = reliability ] && args+=(--trials 16)
  "$meshwork" "${args[@]}" > /tmp/determinism.$$.out 2> /tmp/determinism.$$.err
  rc=$?
  json=$(grep -v -E '"meshwork_(commit|version)"' /tmp/determinism.$$.out)
  # A plan that does not fit: estimate reports it with exit 3; simulate and reliability exit 3
  # with the verdict and no Report. Either is a verdict, part of what is pinned.
  if [ "$rc" = 3 ] && [ "${json:0:1}" != "{" ]; then
    json=$(sed "s|$scenario|PLAN|g" /tmp/determinism.$$.err)
  fi
  if [ "$rc" != 3 ] && [ "${json:0:1}" != "{" ]; then
    echo "FAIL: meshwork ${args[*]} exited $rc without a Report: $(cat /tmp/determinism.$$.err)"
    status=1
    continue
  fi
  got="exit $rc"$'\n'"$json"
  if [ -n "${MESHWORK_UPDATE_GOLDEN:-}" ]; then
    printf '%s\n' "$got" > "$stem.$cmd.json"
    echo "wrote $stem.$cmd.json"
  elif ! diff -u "$stem.$cmd.json" <(printf '%s\n' "$got") > /tmp/determinism.$$.diff; then
    echo "FAIL: meshwork ${args[*]} differs from $stem.$cmd.json (MESHWORK_UPDATE_GOLDEN=1 rewrites it when the change is meant):"
    head -40 /tmp/determinism.$$.diff
    status=1
  else
    echo "ok: $cmd"
  fi
done
rm -f /tmp/determinism.$$.out /tmp/determinism.$$.err /tmp/determinism.$$.diff
exit $status
