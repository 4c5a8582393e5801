#include <cstdio>
#include <ostream>

#include "cli/commands.hpp"
#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "topology/analysis.hpp"
#include "topology/builders.hpp"
#include "topology/dot.hpp"
#include "topology/router.hpp"

namespace meshwork::cli {

void add_topology_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("topology", "The cluster's network: bill of materials, bisection, per-group paths");
  auto file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto dot = std::make_shared<std::string>();
  cmd->add_option("PLAN", *file, "Plan file (YAML or JSON)")->required();
  cmd->add_flag("--json", *json, "Print as JSON");
  cmd->add_option("--dot", *dot, "Write the graph as GraphViz DOT to this file");
  cmd->callback([=, &io] {
    const auto loaded = load_plan_for(io, *file, "build");
    if (!loaded) return;
    const plan::Plan& p = *loaded;
    const auto built = topology::build(p.cluster);
    if (!built.topology) {
      io.err << *file << ": error: cluster.topology: " << built.error << '\n';
      io.exit_code = 1;
      return;
    }
    const auto& t = *built.topology;
    const auto bom = topology::bill_of_materials(t);
    const double bisection = topology::bisection_gbytes_per_s(t);
    const std::int64_t diameter = topology::diameter_hops(t);
    const auto layout = plan::RankLayout::from_plan(p.parallelism);
    nlohmann::json groups = nlohmann::json::object();
    topology::Router router(t);
    for (auto g : plan::kAllGroupKinds) {
      if (!layout.distinct(g)) continue;
      const auto path = topology::group_path(router, layout, g);
      groups[std::string(plan::to_string(g))] = {{"size", layout.group_size(g)}, {"hops", path.hops},
                                                 {"bottleneck_gbytes_per_s", path.bottleneck_gbytes_per_s},
                                                 {"ring_share_gbytes_per_s", topology::ring_share_gbytes_per_s(t, layout, g, p.cluster.topology.routing)},
                                                 {"disconnected", path.disconnected}};
    }
    if (!dot->empty()) {
      std::string error;
      if (!plan::write_file_atomically(*dot, topology::to_dot(t), error)) {
        io.err << "meshwork topology: " << error << '\n';
        io.exit_code = 1;
        return;
      }
    }
    if (*json) {
      io.out << nlohmann::json{{"kind", t.kind},
                               {"gpus", t.count(topology::VertexKind::gpu)},
                               {"nodes", t.nodes},
                               {"switches", bom.switches},
                               {"links", bom.links},
                               {"cables", bom.cables},
                               {"transceivers", bom.transceivers},
                               {"bisection_gbytes_per_s", bisection},
                               {"diameter_hops", diameter},
                               {"groups", groups}}
                    .dump(2)
             << '\n';
      return;
    }
    io.out << t.kind << ": " << t.count(topology::VertexKind::gpu) << " GPUs on " << t.nodes << " nodes\n";
    io.out << "switches:";
    for (const auto& [kind, n] : bom.switches) io.out << ' ' << n << ' ' << kind;
    io.out << "\nlinks:";
    for (const auto& [tier, n] : bom.links) io.out << ' ' << n << ' ' << tier;
    io.out << "\ncables " << bom.cables << ", transceivers " << bom.transceivers << " (scale-out links assumed optical)\n";
    char buf[200];
    std::snprintf(buf, sizeof buf, "bisection bandwidth %.1f TB/s one way; diameter %lld hops GPU to GPU\n", bisection / 1e3,
                  static_cast<long long>(diameter));
    io.out << buf << "groups (group 0, first member to the farthest; ring share: each ring edge's rate with every ring of the kind running, "
                     "spread over the equal-cost paths): \n";
    for (const auto& [g, v] : groups.items()) {
      std::snprintf(buf, sizeof buf, "  %-10s size %6lld  hops %lld  bottleneck %.1f GB/s  ring share %.1f GB/s\n", g.c_str(),
                    static_cast<long long>(v["size"].get<std::int64_t>()), static_cast<long long>(v["hops"].get<std::int64_t>()),
                    v["bottleneck_gbytes_per_s"].get<double>(), v["ring_share_gbytes_per_s"].get<double>());
      io.out << buf;
    }
  });
}

}  // namespace meshwork::cli
