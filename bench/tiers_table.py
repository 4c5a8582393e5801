#!/usr/bin/env python3
"""The table "Estimate against simulation: every shipped scenario" of bench/RESULTS.md, from the
goldens this build's determinism tests hold (tests/golden/scenarios/**/{estimate,simulate}.json).

    python3 bench/tiers_table.py          # prints the table in Markdown

A golden is "exit N" and then, for exit 0, the command's JSON. Columns: both step times, their
difference, and the breakdown terms larger than 2% of the step that differ by more than 5%.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "scenarios"
TERMS = ["compute", "recompute", "tp", "cp", "ep", "dp", "pp", "bubble", "optimizer", "stalls"]


def report(path):
    if not path.exists():
        return None
    first, _, rest = path.read_text().partition("\n")
    return json.loads(rest) if first == "exit 0" else None


def main():
    print("| scenario | estimate (s) | simulate (s) | difference | terms > 2% of the step that differ by > 5% (estimate/simulate, s) |")
    print("|---|---|---|---|---|")
    for estimate_file in sorted(GOLDEN.rglob("*.estimate.json")):
        key = str(estimate_file.relative_to(GOLDEN))[: -len(".estimate.json")]
        simulate_file = estimate_file.with_name(estimate_file.name.replace(".estimate.json", ".simulate.json"))
        e, s = report(estimate_file), report(simulate_file)
        if e is None or s is None:
            if simulate_file.exists():
                print(f"| {key} | | | not simulated (does not fit) | |")
            continue
        es, ss = e["step_time_s"], s["step_time_s"]
        differ = []
        for term in TERMS:
            a, b = e["breakdown"].get(term + "_s", 0), s["breakdown"].get(term + "_s", 0)
            if max(a, b) > 0.02 * ss and abs(a - b) > 0.05 * max(a, b):
                differ.append(f"{term} {a:.3g}/{b:.3g}")
        print(f"| {key} | {es:.3f} | {ss:.3f} | {100 * (es / ss - 1):+.1f}% | {'; '.join(differ)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
