#include <cstdio>
#include <ostream>

#include "cli/commands.hpp"
#include "models/comm.hpp"
#include "models/hardware.hpp"
#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "topology/analysis.hpp"
#include "topology/builders.hpp"
#include "topology/dot.hpp"
#include "topology/fabric_share.hpp"
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
    // The pipeline's boundaries, stage to the next (and the last to the first, which only the
    // interleaved schedule crosses): what each transfer runs on, as the estimate prices it
    // (models::boundary_link).
    nlohmann::json boundaries = nlohmann::json::array();
    if (layout.group_size(plan::GroupKind::pp) > 1) {
      const auto pp_net = models::group_network(p, models::hardware_profile(p.cluster.gpu), plan::GroupKind::pp);
      const std::int64_t stages = layout.group_size(plan::GroupKind::pp);
      const bool wraps = p.parallelism.pipeline_schedule == plan::PipelineSchedule::interleaved;
      for (std::int64_t b = 0; b < (wraps ? stages : stages - 1); ++b) {
        const models::BoundaryLink link = models::boundary_link(pp_net, b);
        boundaries.push_back({{"from_stage", b}, {"to_stage", (b + 1) % stages}, {"inside_node", link.inside_node},
                              {"gbytes_per_s", link.bytes_per_s / 1e9}});
      }
    }
    // A leaf whose NIC ports do not hold whole nodes: a node's NICs then straddle two leaves,
    // and another oversubscription (another split of the radix) moves ranks between leaves, so
    // a sweep over it changes the layout as well as the ratio (not monotonic, bench/RESULTS.md).
    const auto& topo = p.cluster.topology;
    const bool leaves = (topo.kind == plan::TopologyKind::fat_tree || topo.kind == plan::TopologyKind::multi_plane) && t.nodes > 1;
    const std::int64_t leaf_ports = leaves ? topology::split_ports(topo.switch_radix, topo.oversubscription).down : 0;
    const bool straddle = leaves && p.cluster.nics_per_node > 0 && leaf_ports % p.cluster.nics_per_node != 0;
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
                               {"groups", groups},
                               {"pipeline_boundaries", boundaries},
                               {"leaf_nic_ports", leaf_ports},
                               {"nodes_straddle_leaves", straddle}}
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
    char buf[400];
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
    if (!boundaries.empty()) {
      io.out << "pipeline boundaries (each transfer's rate as the estimate prices it):\n";
      constexpr std::size_t kShown = 16;
      for (std::size_t i = 0; i < boundaries.size() && i < kShown; ++i) {
        const auto& b = boundaries[i];
        std::snprintf(buf, sizeof buf, "  stage %lld -> %lld  %-13s %.1f GB/s\n", static_cast<long long>(b["from_stage"].get<std::int64_t>()),
                      static_cast<long long>(b["to_stage"].get<std::int64_t>()), b["inside_node"].get<bool>() ? "inside a node" : "between nodes",
                      b["gbytes_per_s"].get<double>());
        io.out << buf;
      }
      if (boundaries.size() > kShown) io.out << "  ... " << boundaries.size() - kShown << " more (--json lists them all)\n";
    }
    if (straddle) {
      std::snprintf(buf, sizeof buf,
                    "note: a leaf takes %lld NIC ports (radix %lld at %g:1), which do not hold whole nodes of %lld NICs: nodes straddle "
                    "leaves, and another oversubscription also moves ranks between leaves\n",
                    static_cast<long long>(leaf_ports), static_cast<long long>(topo.switch_radix), topo.oversubscription,
                    static_cast<long long>(p.cluster.nics_per_node));
      io.out << buf;
    }
  });
}

}  // namespace meshwork::cli
