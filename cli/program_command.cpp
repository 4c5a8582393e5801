// meshwork program PLAN [--rank R] [--json]: the plan lowered to what every rank does.
#include <cstdio>
#include <map>
#include <set>
#include <ostream>

#include "cli/commands.hpp"
#include "models/flops.hpp"
#include "models/program.hpp"
#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::cli {
namespace {

nlohmann::json instr_json(const models::Program& prog, const models::StageProgram& sp, const models::Instr& in) {
  nlohmann::json j = {{"kind", models::to_string(in.kind)}, {"stream", models::to_string(in.stream)}, {"name", prog.name(in)}};
  if (in.item >= 0) {
    const auto& it = sp.schedule[static_cast<std::size_t>(in.item)];
    j["pass"] = models::to_string(it.pass);
    j["microbatch"] = it.microbatch;
    j["chunk"] = it.chunk;
  }
  if (in.layer >= 0) j["layer"] = in.layer;
  if (in.kind == models::InstrKind::compute) {
    j["phase"] = models::to_string(in.phase);
    j["flops"] = in.flops;
    if (in.cast_bytes > 0) j["cast_bytes"] = in.cast_bytes;  // FP8's operand casts
    if (in.sixteen_bit) j["sixteen_bit"] = true;  // a GEMM an FP8 plan keeps in 16 bits
  }
  if (in.kind == models::InstrKind::collective) {
    j["collective"] = models::to_string(in.collective);
    j["group"] = plan::to_string(in.group);
  }
  if (in.peer_stage >= 0) {
    j["peer_stage"] = in.peer_stage;
    j["tag"] = in.tag;
  }
  j["bytes"] = in.bytes;
  if (in.after >= 0) j["after"] = in.after;
  if (in.also_after >= 0) j["also_after"] = in.also_after;
  if (in.tail_after >= 0) {
    j["tail_after"] = in.tail_after;
    j["tail_fraction"] = in.tail_fraction;
  }
  return j;
}

}  // namespace

void add_program_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("program", "The plan lowered to each rank's ordered ops, with the checker's verdict");
  auto file = std::make_shared<std::string>();
  auto rank = std::make_shared<std::int64_t>(-1);
  auto json = std::make_shared<bool>(false);
  cmd->add_option("PLAN", *file, "Plan file (YAML or JSON)")->required();
  cmd->add_option("--rank", *rank, "Print this rank's op stream");
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->callback([=, &io] {
    const auto loaded = load_plan_for(io, *file, "lower");
    if (!loaded) return;
    const plan::Plan& p = *loaded;
    const auto lowered = models::lower(p);
    if (!lowered.program) {
      io.err << *file << ": error: " << lowered.error << '\n';
      io.exit_code = 1;
      return;
    }
    const models::Program& prog = *lowered.program;
    const auto layout = plan::RankLayout::from_plan(p.parallelism);
    if (*rank >= layout.world_size()) {
      io.err << "meshwork program: --rank " << *rank << " is outside the plan's " << layout.world_size() << " ranks\n";
      io.exit_code = 1;
      return;
    }
    const models::CheckResult verdict = models::check(prog, models::step_flops(p).hardware);
    if (*rank >= 0) {
      const models::RankView v = models::for_rank(prog, layout, *rank);
      if (*json) {
        nlohmann::json ops = nlohmann::json::array();
        for (const auto& in : v.stage->instrs) ops.push_back(instr_json(prog, *v.stage, in));
        nlohmann::json groups = nlohmann::json::object();
        for (const auto& [g, index] : v.groups) groups[std::string(plan::to_string(g))] = index;
        io.out << nlohmann::json{{"rank", v.rank}, {"stage", v.stage->stage}, {"prev_rank", v.prev_rank},
                                 {"next_rank", v.next_rank}, {"groups", groups}, {"ops", ops}}
                      .dump(2)
               << '\n';
      } else {
        io.out << "rank " << v.rank << ": stage " << v.stage->stage << " of " << prog.stages << ", " << v.stage->instrs.size()
               << " ops (previous stage rank " << v.prev_rank << ", next " << v.next_rank << ")\n";
        char buf[240];
        for (std::size_t i = 0; i < v.stage->instrs.size(); ++i) {
          const auto& in = v.stage->instrs[i];
          std::string where;
          if (in.item >= 0) {
            const auto& it = v.stage->schedule[static_cast<std::size_t>(in.item)];
            where = std::string(models::to_string(it.pass)) + " mb " + std::to_string(it.microbatch) + " chunk " + std::to_string(it.chunk);
          } else {
            where = "step";
          }
          std::string waits = in.after >= 0 ? " after " + std::to_string(in.after) : "";
          if (in.also_after >= 0) waits += " and " + std::to_string(in.also_after);
          if (in.tail_after >= 0) waits += ", its last " + fmt("%.3g", in.tail_fraction) + " after " + std::to_string(in.tail_after);
          std::snprintf(buf, sizeof buf, "%6zu  %-8s %-22s %-22s layer %3d  %10.3g FLOP %10.3g B%s\n", i,
                        std::string(models::to_string(in.stream)).c_str(), prog.name(in).c_str(), where.c_str(), in.layer, in.flops,
                        in.bytes, waits.c_str());
          io.out << buf;
        }
      }
      if (!verdict.ok()) io.exit_code = 1;
      return;
    }
    // Summary: ops by stream and kind per stage class.
    nlohmann::json classes = nlohmann::json::array();
    for (const auto& sp : prog.classes) {
      std::map<std::string, std::int64_t> by;
      for (const auto& in : sp.instrs) ++by[std::string(models::to_string(in.stream)) + "/" + std::string(models::to_string(in.kind))];
      // What each model chunk holds, read back from its forward compute ops: the layers, and
      // whether the embedding or the loss runs there.
      std::vector<std::set<std::int32_t>> layers(static_cast<std::size_t>(prog.chunks));
      std::vector<bool> embedding(static_cast<std::size_t>(prog.chunks)), loss(static_cast<std::size_t>(prog.chunks));
      for (const auto& in : sp.instrs) {
        if (in.kind != models::InstrKind::compute || in.item < 0 || in.phase != models::OpPhase::forward) continue;
        const auto chunk = static_cast<std::size_t>(sp.schedule[static_cast<std::size_t>(in.item)].chunk);
        if (in.layer >= 0) layers[chunk].insert(in.layer);
        if (in.op == models::OpKind::embedding) embedding[chunk] = true;
        if (in.op == models::OpKind::loss) loss[chunk] = true;
      }
      nlohmann::json chunks = nlohmann::json::array();
      for (std::size_t c = 0; c < layers.size(); ++c) {
        nlohmann::json ch = {{"layers", layers[c].size()}, {"embedding", static_cast<bool>(embedding[c])}, {"loss", static_cast<bool>(loss[c])}};
        if (!layers[c].empty()) ch["first_layer"] = *layers[c].begin();
        chunks.push_back(ch);
      }
      classes.push_back({{"stage", sp.stage}, {"ranks", sp.ranks}, {"schedule_items", sp.schedule.size()}, {"ops", sp.instrs.size()},
                         {"by_stream", by}, {"chunks", chunks}});
    }
    const models::ReplayResult rep = models::replay(prog, models::unit_item_durations(prog));
    nlohmann::json summary = {{"schedule", plan::to_string(prog.schedule)},
                              {"stages", prog.stages},
                              {"chunks", prog.chunks},
                              {"microbatches", prog.microbatches},
                              {"classes", classes},
                              {"unit_replay_bubble_fraction", rep.bubble_fraction},
                              {"check", {{"ok", verdict.ok()}, {"errors", verdict.errors}, {"flops", verdict.flops}, {"max_in_flight", verdict.max_in_flight}}}};
    if (*json) {
      io.out << summary.dump(2) << '\n';
    } else {
      io.out << "program of " << p.name << ": " << plan::to_string(prog.schedule) << ", " << prog.stages << " stages x "
             << prog.chunks << " chunks, " << prog.microbatches << " micro-batches per step\n";
      io.out << "rank classes (one per stage; ranks of a stage share one op list):\n";
      for (const auto& c : classes) {
        io.out << "  stage " << c["stage"].get<std::int64_t>() << ": " << c["ranks"].get<std::int64_t>() << " ranks, "
               << c["ops"].get<std::size_t>() << " ops:";
        for (const auto& [k, n] : c["by_stream"].items()) io.out << ' ' << n.get<std::int64_t>() << ' ' << k;
        // The chunks in Megatron's layout letters: E embedding, t per layer, L loss.
        io.out << "; chunks";
        for (const auto& ch : c["chunks"]) {
          std::string letters = ch["embedding"].get<bool>() ? "E" : "";
          const auto n = ch["layers"].get<std::int64_t>();
          if (n > 0) letters += n == 1 ? "t" : "t*" + std::to_string(n);
          if (ch["loss"].get<bool>()) letters += "L";
          io.out << ' ' << (letters.empty() ? "-" : letters);
        }
        io.out << '\n';
      }
      char buf[200];
      std::snprintf(buf, sizeof buf, "replay with equal pass times and free communication: bubble %.4f\n", rep.bubble_fraction);
      io.out << buf;
      if (verdict.ok()) {
        std::snprintf(buf, sizeof buf, "check: ok (sends match receives, no deadlock, in-flight within bounds, %.4e FLOPs = the cost model's)\n",
                      verdict.flops);
        io.out << buf;
      } else {
        for (const auto& e : verdict.errors) io.out << "check: error: " << e << '\n';
      }
    }
    if (!verdict.ok()) io.exit_code = 1;
  });
}

}  // namespace meshwork::cli
