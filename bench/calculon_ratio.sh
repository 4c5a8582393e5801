#!/usr/bin/env bash
# The closed form's speed against Calculon's (Isaev et al., SC'23; github.com/calculon-ai/calculon,
# Apache-2.0, pure Python, no dependencies) on the same plan, measured side by side on this machine:
# NAR21's GPT-3 175B on 1,024 A100 (TP 8 x PP 8 x DP 16, interleaved v = 2, batch 1,536, full
# recompute; scenarios/gpt3-175b-a100-1024.yaml). Calculon is timed in-process (its Llm
# compile + run, the call its `llm` command makes, after the JSON files are read), meshwork by
# bench/estimate_bench.cpp's BM_Estimate (plan loaded, estimate only), each alternated three times.
#
#   bench/calculon_ratio.sh CALCULON_CHECKOUT [build/release/bench/meshwork_bench]
#
# Calculon is not a Debian package; clone it anywhere (the project does not vendor it). It imports
# numpy: `apt-get install python3-numpy` (Debian's /usr/bin/python3 runs it).
set -euo pipefail
calc="${1:?the path of a Calculon checkout}"
bench="${2:-build/release/bench/meshwork_bench}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/exe.json" <<'JSON'
{"num_procs": 1024, "tensor_par": 8, "pipeline_par": 8, "data_par": 16,
 "tensor_par_net": 0, "pipeline_par_net": 1, "data_par_net": 1,
 "batch_size": 1536, "microbatch_size": 1, "datatype": "float16",
 "fused_activation": true, "attention_type": "multihead", "activation_recompute": "full",
 "pipeline_interleaving": 2, "optimizer_sharding": false, "tensor_par_comm_type": "ar",
 "tensor_par_overlap": "none", "seq_par_ag_redo": false, "data_par_overlap": true,
 "weight_offload": false, "activations_offload": false, "optimizer_offload": false, "training": true}
JSON
calculon_us() {
  PYTHONPATH="$calc" /usr/bin/python3 - "$calc" "$work/exe.json" <<'PY'
import importlib.util, logging, sys, time, types
# Calculon's package imports pandas and psutil for its sweeps only (CSV output, process
# counts); a single evaluation never calls them.
for name in ("pandas", "psutil"):
    if importlib.util.find_spec(name) is None:
        sys.modules[name] = types.ModuleType(name)
import calculon
from calculon.llm import Llm
from calculon.system import System
root, exe_path = sys.argv[1:3]
app = Llm.Application(calculon.io.read_json_file(root + "/models/gpt3-175B.json"))
exe_json = calculon.io.read_json_file(exe_path)
sys_json = calculon.io.read_json_file(root + "/systems/a100_80g.json")
log = logging.getLogger("calculon")
def once():
    model = Llm(app, log)
    model.compile(System(sys_json), Llm.Execution.from_json(exe_json))
    model.run(System(sys_json))
    return model
once()
n, start = 0, time.perf_counter()
while time.perf_counter() - start < 2.0:
    once(); n += 1
print("%.1f" % ((time.perf_counter() - start) / n * 1e6))
PY
}
meshwork_us() {
  "$bench" --benchmark_filter='BM_Estimate$' --benchmark_min_time=2 --benchmark_format=csv 2>/dev/null |
    awk -F, '/BM_Estimate/ { printf "%.1f\n", $3 / 1000 }'
}
printf '| run | Calculon (us per evaluation) | meshwork estimate (us) | ratio |\n|---|---|---|---|\n'
for i in 1 2 3; do
  c=$(calculon_us); m=$(meshwork_us)
  printf '| %d | %s | %s | %.1f |\n' "$i" "$c" "$m" "$(echo "$c / $m" | bc -l)"
done
