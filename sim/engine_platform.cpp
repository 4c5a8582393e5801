// Peers, routes, the colours of alike actors and the SimGrid platform of their flow classes (engine.hpp).
#include "sim/engine.hpp"

#include <set>

namespace meshwork::sim::engine {

std::optional<std::string> Simulation::resolve_failure() {
  FailureTarget t = resolve_failure_target(options_.failure->target, topo_, world_, p_.cluster.gpus_per_node);
  if (!t.error.empty()) return t.error;
  failing_rank_ = std::move(t.rank);
  failing_link_ids_ = std::move(t.links);
  after_ = std::move(t.after);
  return std::nullopt;
}

void Simulation::find_peers() {
  for (const auto& sp : program_.classes) {
    for (const auto& in : sp.instrs) {
      if (in.kind == InstrKind::collective && layout_.group_size(in.group) > 1 && std::find(kinds_.begin(), kinds_.end(), in.group) == kinds_.end()) {
        kinds_.push_back(in.group);
      }
    }
  }
  const std::size_t types = kinds_.size() + 2;
  peer_.assign(types, std::vector<std::int64_t>(static_cast<std::size_t>(world_), -1));
  group_.assign(types, {});
  for (std::size_t t = 0; t < kinds_.size(); ++t) group_[t].assign(static_cast<std::size_t>(world_), -1);
  nets_.clear();
  for (const auto g : kinds_) nets_.push_back(models::group_network(p_, timer_.hardware(), g));
  for (std::int64_t r = 0; r < world_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    for (std::size_t t = 0; t < kinds_.size(); ++t) {
      peer_[t][i] = ring_successor(t, r);
      group_[t][i] = layout_.group_index(kinds_[t], r);
    }
    if (program_.stages > 1) {
      const auto v = models::for_rank(program_, layout_, r);
      peer_[kinds_.size()][i] = v.next_rank;
      peer_[kinds_.size() + 1][i] = v.prev_rank;
    }
  }
}

void Simulation::find_routes() {
  const auto& hw = timer_.hardware();
  links_.resize(boost::num_edges(topo_.graph));
  for (auto e : boost::make_iterator_range(boost::edges(topo_.graph))) {
    const auto& l = topo_.graph[e];
    // What a collective achieves of a link's line rate (the hardware profile's NVLink and
    // NIC efficiencies, the same the estimate uses). A link that is down keeps a trickle;
    // routes avoid it.
    const double efficiency = l.tier == topology::LinkTier::nvlink ? hw.nvlink_efficiency : hw.nic_efficiency;
    links_[static_cast<std::size_t>(l.id)] = {std::max(l.bandwidth_gbytes_per_s, 1e-9) * 1e9 * efficiency, l.latency_us * 1e-6,
                                              boost::source(e, topo_.graph), boost::target(e, topo_.graph)};
  }
  if (options_.free_communication) {
    route_.assign(peer_.size(), std::vector<Route>(static_cast<std::size_t>(world_)));
    flows_per_edge_.assign(peer_.size(), 1);
    return;
  }
  std::vector<double> latency_s(links_.size());
  for (std::size_t i = 0; i < links_.size(); ++i) latency_s[i] = links_[i].latency_s;
  FlowRoutes routes = route_flows(topo_, p_.cluster.topology, peer_, latency_s);
  for (std::size_t t = 0; t < peer_.size(); ++t) {
    for (std::int64_t a = 0; a < world_; ++a) {
      if (routes.route[t][static_cast<std::size_t>(a)].unreachable) {
        throw std::runtime_error("no route from rank " + std::to_string(a) + " to " + std::to_string(peer_[t][static_cast<std::size_t>(a)]));
      }
    }
  }
  route_ = std::move(routes.route);
  flows_per_edge_ = std::move(routes.flows_per_edge);
  base_types_ = peer_.size();
  if (!after_) return;
  // A link or switch that fails: every flow type again, on the fabric without it (types
  // base_types_ and up), played once the fabric has rerouted. A pair the fault leaves without
  // a path keeps its old route, which crosses the dead link: its flows fail there.
  FlowRoutes rerouted = route_flows(*after_, p_.cluster.topology, peer_, latency_s);
  for (std::size_t t = 0; t < base_types_; ++t) {
    for (std::size_t a = 0; a < static_cast<std::size_t>(world_); ++a) {
      Route& r = rerouted.route[t][a];
      if (!r.unreachable) continue;
      r = route_[t][a];
      if (partitioned_.empty()) {
        const std::string what = t < kinds_.size() ? std::string(plan::to_string(kinds_[t])) + " ring edge" : "pipeline transfer";
        partitioned_ = "the " + what + " from rank " + std::to_string(a) + " to rank " + std::to_string(peer_[t][a]) + " has no path without " +
                       options_.failure->target;
      }
    }
    peer_.push_back(peer_[t]);
    group_.push_back(group_[t]);
    route_.push_back(std::move(rerouted.route[t]));
    flows_per_edge_.push_back(rerouted.flows_per_edge[t]);
  }
}

bool Simulation::has_flow(std::size_t t, std::int64_t r) const {
  const std::int64_t to = peer_[t][static_cast<std::size_t>(r)];
  return to >= 0 && to != r;
}

void Simulation::plan_actors() {
  const std::int64_t tp = layout_.group_size(plan::GroupKind::tp);
  const bool grouped = !options_.fine && tp > 1 && layout_.group_span(plan::GroupKind::tp) < p_.cluster.gpus_per_node;
  node_of_.resize(static_cast<std::size_t>(world_));
  std::vector<std::vector<std::int64_t>> lanes;  // per node, ascending (the first leads)
  for (std::int64_t r = 0; r < world_; ++r) {
    const std::int64_t v = grouped ? layout_.group_index(plan::GroupKind::tp, r) : r;
    node_of_[static_cast<std::size_t>(r)] = v;
    if (static_cast<std::size_t>(v) >= lanes.size()) lanes.resize(static_cast<std::size_t>(v) + 1);
    lanes[static_cast<std::size_t>(v)].push_back(r);
  }
  const std::size_t nodes = lanes.size(), types = peer_.size();
  FlowSystem fs;
  fs.ranks = static_cast<std::int64_t>(nodes);
  fs.actor.resize(nodes);
  fs.initial.resize(nodes);
  pace_.assign(nodes, 1.0);
  // What a failing link or switch does to each node's flows: 1, some cross it until the fabric
  // reroutes; 2, some still cross it after (a pair left without a path: they wait for good).
  // Structure, not path: a colour past the budget of played actors (symmetry.hpp) must not
  // hold nodes the failure treats differently.
  std::vector<std::int64_t> fate(nodes, 0);
  if (!failing_link_ids_.empty()) {
    const std::set<std::int64_t> failing(failing_link_ids_.begin(), failing_link_ids_.end());
    for (std::size_t t = 0; t < route_.size(); ++t) {
      for (std::int64_t r = 0; r < world_; ++r) {
        for (const auto& h : route_[t][static_cast<std::size_t>(r)].hops) {
          if (failing.count(h.link) != 0) fate[static_cast<std::size_t>(node_of_[static_cast<std::size_t>(r)])] |= t < base_types_ ? 1 : 2;
        }
      }
    }
  }
  std::map<std::pair<std::int64_t, double>, std::int64_t> start;
  for (std::size_t v = 0; v < nodes; ++v) {
    fs.actor[v] = static_cast<std::int64_t>(v);
    for (auto r : lanes[v]) pace_[v] = std::max(pace_[v], slowdown_[static_cast<std::size_t>(r)]);
    // A node that will fail is unlike any other.
    bool doomed = false;
    for (auto r : lanes[v]) doomed = doomed || (!failing_rank_.empty() && failing_rank_[static_cast<std::size_t>(r)]);
    const std::int64_t kind = (layout_.coord(lanes[v].front()).pp * 2 + (doomed ? 1 : 0)) * 4 + fate[v];
    fs.initial[v] = start.emplace(std::pair{kind, pace_[v]}, static_cast<std::int64_t>(start.size())).first->second;
  }
  fs.peer.assign(types, std::vector<std::int64_t>(nodes, -1));
  fs.group.assign(types, {});
  fs.route.assign(types, std::vector<const std::vector<topology::Hop>*>(nodes, nullptr));
  fs.latency_s.assign(types, std::vector<double>(nodes, 0.0));
  bundle_.assign(types, std::vector<Route>(nodes));
  lane_flows_.assign(types, std::vector<std::int32_t>(nodes, 0));
  for (std::size_t t = 0; t < types; ++t) {
    if (!group_[t].empty()) fs.group[t].assign(nodes, -1);
    for (std::size_t v = 0; v < nodes; ++v) {
      const std::int64_t lead = lanes[v].front();
      const std::int64_t to = peer_[t][static_cast<std::size_t>(lead)];
      fs.peer[t][v] = to < 0 ? -1 : node_of_[static_cast<std::size_t>(to)];
      if (!group_[t].empty()) fs.group[t][v] = group_[t][static_cast<std::size_t>(lead)];
      if (!has_flow(t, lead)) continue;
      Route& b = bundle_[t][v];
      for (auto r : lanes[v]) {
        const Route& mine = route_[t][static_cast<std::size_t>(r)];
        b.hops.insert(b.hops.end(), mine.hops.begin(), mine.hops.end());
        b.latency_s = std::max(b.latency_s, mine.latency_s);
        ++lane_flows_[t][v];
      }
      fs.route[t][v] = &b.hops;
      fs.latency_s[t][v] = b.latency_s;
    }
  }
  fs.capacity.resize(2 * links_.size());
  for (std::size_t i = 0; i < links_.size(); ++i) fs.capacity[2 * i] = fs.capacity[2 * i + 1] = links_[i].bytes_per_s;
  if (!failing_link_ids_.empty()) {
    fs.mark.assign(fs.capacity.size(), 0);
    for (const auto id : failing_link_ids_) fs.mark[static_cast<std::size_t>(2 * id)] = fs.mark[static_cast<std::size_t>(2 * id + 1)] = 1;
  }
  colouring_ = colour_ranks(fs, options_.mirror_alike, static_cast<std::int32_t>(std::clamp<std::int64_t>(options_.max_played_actors, 0, INT32_MAX)));

  // One played actor per colour, led by its first rank.
  const auto colours = static_cast<std::size_t>(colouring_.colours);
  rep_.assign(colours, -1);
  played_actor_.assign(colours, 0);
  for (std::size_t v = 0; v < nodes; ++v) {
    const auto c = static_cast<std::size_t>(colouring_.colour[v]);
    if (rep_[c] >= 0) continue;
    rep_[c] = lanes[v].front();
    played_actor_[c] = leads_.size();
    leads_.push_back(lanes[v].front());
  }
  // Flow classes: per (colour, type), the lane flows they stand for and the links these cross.
  flow_class_.assign(colours * types, {});
  std::vector<std::unordered_map<std::size_t, std::int32_t>> count(colours * types);
  for (std::size_t t = 0; t < types; ++t) {
    for (std::size_t v = 0; v < nodes; ++v) {
      if (lane_flows_[t][v] == 0) continue;
      const auto c = static_cast<std::size_t>(colouring_.colour[v]);
      FlowClass& fc = flow_class_[c * types + t];
      fc.members += lane_flows_[t][v];
      fc.from = rep_[c];
      fc.latency_s = std::max(fc.latency_s, bundle_[t][v].latency_s);  // members alike in structure only: the slowest
      for (const auto& h : bundle_[t][v].hops) ++count[c * types + t][h.slot()];
    }
  }
  for (std::size_t i = 0; i < flow_class_.size(); ++i) {
    flow_class_[i].on_slot.assign(count[i].begin(), count[i].end());
    std::sort(flow_class_[i].on_slot.begin(), flow_class_[i].on_slot.end());
  }
  // The distinct colours in each kind of collective group.
  group_colours_.clear();
  for (std::size_t t = 0; t < kinds_.size(); ++t) {
    for (std::size_t v = 0; v < nodes; ++v) {
      const auto kind = colouring_.group_kind[t][v];
      if (kind < 0) continue;
      auto& cs = group_colours_[kind];
      const auto c = colouring_.colour[v];
      if (std::find(cs.begin(), cs.end(), c) == cs.end()) cs.push_back(c);
    }
  }
}

void Simulation::build_platform() {
  auto* impl = new ClassZone("cluster");  // owned by SimGrid's engine
  auto* zone = impl->get_iface();
  host_of_.assign(static_cast<std::size_t>(world_), nullptr);
  for (const auto lead : leads_) {
    auto* host = zone->create_host("gpu" + std::to_string(lead), kSpeed);
    host_of_[static_cast<std::size_t>(lead)] = host;
    if (!failing_rank_.empty() && failing_rank_[static_cast<std::size_t>(lead)]) failing_hosts_.push_back(host);
  }
  sink_ = zone->create_host("sink", kSpeed);
  std::vector<sg4::Link*> by_colour(static_cast<std::size_t>(colouring_.link_colours), nullptr);
  sg4::Link* free_link = nullptr;
  if (options_.free_communication) {
    free_link = zone->create_link("free", 1e30)->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE)->set_latency(0);
  } else {
    for (std::size_t slot = 0; slot < colouring_.link_colour.size(); ++slot) {
      const auto k = colouring_.link_colour[slot];
      if (k < 0 || by_colour[static_cast<std::size_t>(k)] != nullptr) continue;
      by_colour[static_cast<std::size_t>(k)] = zone->create_link("k" + std::to_string(k), links_[slot / 2].bytes_per_s)->set_latency(0);
      if (std::find(failing_link_ids_.begin(), failing_link_ids_.end(), static_cast<std::int64_t>(slot / 2)) != failing_link_ids_.end()) {
        failing_links_.push_back(by_colour[static_cast<std::size_t>(k)]);
      }
    }
  }
  // Per flow class, the members it puts on one link of each colour it crosses.
  std::vector<std::map<std::int32_t, std::int32_t>> per_colour(flow_class_.size());
  for (std::size_t i = 0; i < flow_class_.size(); ++i) {
    for (const auto& [slot, count] : flow_class_[i].on_slot) per_colour[i][colouring_.link_colour[slot]] = count;
  }
  // A link colour crossed by exactly the same classes with the same weights as another of
  // no more capacity can never bind before it (a GPU's link to its NIC and the NIC's to its
  // leaf carry the same flows): it is left out of every route, which changes no rate.
  std::vector<std::vector<std::pair<std::size_t, std::int32_t>>> users(static_cast<std::size_t>(colouring_.link_colours));
  for (std::size_t i = 0; i < flow_class_.size(); ++i) {
    for (const auto& [k, count] : per_colour[i]) users[static_cast<std::size_t>(k)].emplace_back(i, count);
  }
  std::vector<bool> dominated(users.size(), false);
  if (!options_.free_communication) {
    std::map<std::vector<std::pair<std::size_t, std::int32_t>>, std::int32_t> tightest;  // users -> the link colour kept
    for (std::size_t k = 0; k < users.size(); ++k) {
      if (users[k].empty()) continue;
      if (std::find(failing_links_.begin(), failing_links_.end(), by_colour[k]) != failing_links_.end()) continue;  // kept: it fails
      const auto [it, fresh] = tightest.emplace(users[k], static_cast<std::int32_t>(k));
      if (fresh) continue;
      const auto kept = static_cast<std::size_t>(it->second);
      if (by_colour[k]->get_bandwidth() < by_colour[kept]->get_bandwidth()) {
        dominated[kept] = true;
        it->second = static_cast<std::int32_t>(k);
      } else {
        dominated[k] = true;
      }
    }
  }
  flow_host_.assign(flow_class_.size(), nullptr);
  crosses_failed_.assign(flow_class_.size(), false);
  for (std::size_t i = 0; i < flow_class_.size(); ++i) {
    for (const auto& [slot, count] : flow_class_[i].on_slot) {
      if (std::find(failing_link_ids_.begin(), failing_link_ids_.end(), static_cast<std::int64_t>(slot / 2)) != failing_link_ids_.end()) crosses_failed_[i] = true;
    }
  }
  for (std::size_t i = 0; i < flow_class_.size(); ++i) {
    const FlowClass& fc = flow_class_[i];
    if (fc.members == 0) continue;
    std::vector<sg4::Link*> route;
    if (options_.free_communication) {
      route.push_back(free_link);
    } else {
      for (const auto& [k, count] : per_colour[i]) {
        if (dominated[static_cast<std::size_t>(k)]) continue;
        for (std::int32_t j = 0; j < count; ++j) route.push_back(by_colour[static_cast<std::size_t>(k)]);
      }
    }
    flow_host_[i] = zone->create_host("flow" + std::to_string(i), kSpeed);
    impl->set_route(flow_host_[i], route);
  }
  zone->seal();
}

}  // namespace meshwork::sim::engine
