#!/usr/bin/env bash
# Both tiers against the published runs of the calibration sets (models/calibration_set.hpp):
# Ampere's (NAR21 Tables 1-2 PTD-P, KOR22; docs/reference/published-runs.md A1, A2), the runs
# kept out of it (NAR21 Table 2's ZeRO-3 rows) and Hopper's FP8 set (A3, NeMo 24.07):
# `meshwork accuracy --json` for the estimate and Ampere's leave-one-out refits,
# `meshwork simulate --json --ignore-memory` for each plan. Prints the Markdown tables of
# bench/RESULTS.md ("The calibration sets, both tiers, and the intervals Reports carry").
#
#   bench/accuracy.sh [build/release/cli/meshwork]     # from the repository's root
set -euo pipefail
bin="${1:-build/release/cli/meshwork}"
acc=$(mktemp)
trap 'rm -f "$acc" "$acc".*' EXIT
"$bin" accuracy --json >"$acc" 2>/dev/null
for name in $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(' '.join(c['scenario'] for c in j['cases'] + j['outside'] + j['hopper_fp8']))" "$acc"); do
  "$bin" simulate "scenarios/published/$name.yaml" --json --ignore-memory >"$acc.$name" 2>/dev/null || true
done
python3 - "$acc" <<'PY'
import json, sys
acc = json.load(open(sys.argv[1]))
def simulated(case, figure):
    r = json.load(open(sys.argv[1] + "." + case["scenario"]))
    if figure == "tokens/s":
        return r["tokens_per_s"] / r["num_gpus"]
    return r["mfu"] * 100 if figure == "MFU %" else r["tflops_per_gpu"]["hardware"]
def table(rows, loo):
    head = "| scenario | source | figure | published | estimated | error | simulated | error |"
    if loo:
        head += " left out: estimated | error |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    est_err, sim_err = [], []
    for c in rows:
        figure = c.get("figure", "TFLOP/s")
        sim = simulated(c, figure)
        e, s = c["predicted"] / c["published"] - 1, sim / c["published"] - 1
        est_err.append(abs(e)); sim_err.append(abs(s))
        line = f"| {c['scenario']} | {c['source']} | {figure} | {c['published']:g} | {c['predicted']:.1f} | {100*e:+.1f}% | {sim:.1f} | {100*s:+.1f}% |"
        if loo:
            line += f" {c['loo_predicted']:.1f} | {100*(c['loo_predicted']/c['published']-1):+.1f}% |"
        print(line)
    n = len(rows)
    print(f"\nmean |error|: estimate {100*sum(est_err)/n:.1f}%, simulate {100*sum(sim_err)/n:.1f}%; "
          f"largest: estimate {100*max(est_err):.1f}%, simulate {100*max(sim_err):.1f}%\n")
print("Ampere's calibration set:\n")
table(acc["cases"], True)
print(f"Largest-GEMM efficiency: shipped {acc['shipped_gemm_max_efficiency']:.4f}, refitted on the set "
      f"{acc['refitted_gemm_max_efficiency']:.4f}. Residuals {acc['log_ratio_min']:+.4f} to {acc['log_ratio_max']:+.4f} "
      f"(ln); the largest move of another case on a refit without one "
      f"{100*acc['largest_move']:.2f}%; each case inside the range of the others' residuals "
      f"{100*acc['coverage']:.1f}%.\n")
print("Kept out of the set:\n")
table(acc["outside"], False)
print("Hopper's FP8 set (NeMo 24.07 on DGX-H100, A3), at the shipped factor:\n")
table(acc["hopper_fp8"], False)
# The interval FP8 Reports on Hopper carry, and each run against the others' (the estimate's from
# `meshwork accuracy`; the simulator's by the same rule as models::prediction_interval: the range
# from 19 runs, otherwise mean +- t(0.95; n - 1) s sqrt(1 + 1/n), t from the NIST/SEMATECH
# e-Handbook's table, linear in 1/df beyond 30).
import math, statistics
T95 = [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
       1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697]
BEYOND = [(30, 1.697), (40, 1.684), (60, 1.671), (100, 1.660), (math.inf, 1.645)]
def t95(df):
    if df <= 30:
        return T95[df - 1]
    for (d0, t0), (d1, t1) in zip(BEYOND, BEYOND[1:]):
        if df <= d1:
            return t0 + (t1 - t0) * (1 / df - 1 / d0) / (1 / d1 - 1 / d0)
def interval(r, use_range):
    if use_range:
        return min(r), max(r), 1 - 2 / (len(r) + 1)
    n = len(r); m = statistics.mean(r); h = t95(n - 1) * statistics.stdev(r) * math.sqrt(1 + 1 / n)
    return m - h, m + h, 0.90
def coverage(r):
    use_range = len(r) >= 19
    return sum(1 for i in range(len(r)) if interval(r[:i] + r[i + 1:], use_range)[0] <= r[i] <= interval(r[:i] + r[i + 1:], use_range)[1]) / len(r)
sim = [math.log(simulated(c, c["figure"]) / c["published"]) for c in acc["hopper_fp8"]]
hi = acc.get("hopper_fp8_interval")
if hi and len(sim) >= 4:
    lo_s, hi_s, level = interval(sim, len(sim) >= 19)
    print(f"Interval ({100*hi['level']:.0f}%): estimate {hi['log_lo']:+.4f} to {hi['log_hi']:+.4f} (ln), each run inside the others' "
          f"{100*hi['coverage']:.1f}%; simulator ({100*level:.0f}%) {lo_s:+.4f} to {hi_s:+.4f}, {100*coverage(sim):.1f}%.")
PY
