#include <iomanip>
#include <ostream>

#include "cli/commands.hpp"
#include "plan/plan_io.hpp"
#include "plan/presets.hpp"

namespace meshwork::cli {

void add_presets_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("presets", "List GPU and model presets with their sources");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([json, &io] {
    if (*json) {
      nlohmann::json out = {{"gpus", nlohmann::json::array()}, {"models", nlohmann::json::array()}};
      for (const auto& g : plan::gpu_presets()) {
        plan::Plan p;
        p.cluster.gpu = g.spec;
        out["gpus"].push_back({{"name", g.key}, {"spec", plan::to_json(p)["cluster"]["gpu"]}, {"source", g.source}});
      }
      for (const auto& m : plan::model_presets()) {
        plan::Plan p;
        p.model = m.model;
        out["models"].push_back({{"name", m.key}, {"model", plan::to_json(p)["model"]}, {"source", m.source}});
      }
      io.out << out.dump(2) << '\n';
      return;
    }
    io.out << "GPUs (dense TFLOP/s; HBM GiB, GB/s; NVLink GB/s one way)\n";
    io.out << std::left << std::setw(15) << "name" << std::right << std::setw(7) << "bf16" << std::setw(7) << "fp8"
           << std::setw(7) << "fp32" << std::setw(8) << "HBM" << std::setw(7) << "HBM/s" << std::setw(8) << "NVLink"
           << "  source\n";
    for (const auto& g : plan::gpu_presets()) {
      const auto& s = g.spec;
      io.out << std::left << std::setw(15) << g.key << std::right << std::setw(7) << s.peak_tflops.bf16 << std::setw(7)
             << s.peak_tflops.fp8 << std::setw(7) << s.peak_tflops.fp32 << std::setw(8) << std::setprecision(4)
             << s.hbm_gib << std::setw(7) << s.hbm_gbytes_per_s << std::setw(8) << s.nvlink_gbytes_per_s << "  "
             << g.source << '\n';
    }
    io.out << "\nModels\n";
    io.out << std::left << std::setw(20) << "name" << std::right << std::setw(7) << "layers" << std::setw(7) << "hidden"
           << std::setw(6) << "heads" << std::setw(5) << "kv" << std::setw(7) << "ffn" << std::setw(8) << "experts"
           << "  source\n";
    for (const auto& m : plan::model_presets()) {
      const auto& x = m.model;
      io.out << std::left << std::setw(20) << m.key << std::right << std::setw(7) << x.num_layers << std::setw(7)
             << x.hidden_size << std::setw(6) << x.num_attention_heads << std::setw(5)
             << (x.num_query_groups ? x.num_query_groups : x.num_attention_heads) << std::setw(7)
             << (x.ffn_hidden_size ? x.ffn_hidden_size : 4 * x.hidden_size) << std::setw(8) << x.moe.num_moe_experts
             << "  " << m.source << '\n';
    }
  });
}

}  // namespace meshwork::cli
