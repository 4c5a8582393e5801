#include "plan/rank_layout.hpp"

#include <algorithm>

namespace meshwork::plan {
namespace {

constexpr std::array<std::pair<MeshDim, std::string_view>, kMeshDims> kDimNames = {{
    {MeshDim::tp, "tp"}, {MeshDim::cp, "cp"}, {MeshDim::ep, "ep"}, {MeshDim::dp, "dp"}, {MeshDim::pp, "pp"}}};

std::size_t idx(MeshDim d) { return static_cast<std::size_t>(d); }

}  // namespace

std::string_view to_string(MeshDim d) { return kDimNames[idx(d)].second; }

std::string_view to_string(GroupKind g) {
  switch (g) {
    case GroupKind::tp: return "tp";
    case GroupKind::cp: return "cp";
    case GroupKind::ep: return "ep";
    case GroupKind::dp: return "dp";
    case GroupKind::expert_dp: return "expert_dp";
    case GroupKind::pp: return "pp";
    case GroupKind::dp_cp: return "dp_cp";
    case GroupKind::dp_shard: return "dp_shard";
    case GroupKind::dp_replica: return "dp_replica";
    case GroupKind::expert_dp_shard: return "expert_dp_shard";
    case GroupKind::expert_dp_replica: return "expert_dp_replica";
  }
  return "?";
}

std::optional<DimOrder> parse_order(std::string_view text, std::string& error) {
  DimOrder order{};
  std::array<bool, kMeshDims> seen{};
  std::size_t n = 0;
  std::string_view rest = text;
  while (true) {
    const auto dash = rest.find('-');
    // Compared as Megatron's order.lower(), without a string a token (the estimate lays out
    // its mesh once a plan: issue 18).
    const std::string_view token = rest.substr(0, dash);
    auto lower = [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c); };
    auto lowered = [&] {
      std::string out(token);
      for (char& c : out) c = lower(c);
      return out;
    };
    auto it = std::find_if(kDimNames.begin(), kDimNames.end(), [&](const auto& p) {
      return p.second.size() == token.size() && std::equal(token.begin(), token.end(), p.second.begin(), [&](char a, char b) { return lower(a) == b; });
    });
    if (it == kDimNames.end()) {
      error = "\"" + lowered() + "\" is not a mesh dimension (tp, cp, ep, dp, pp)";
      return std::nullopt;
    }
    if (seen[idx(it->first)]) {
      error = lowered() + " appears twice";
      return std::nullopt;
    }
    if (n == kMeshDims) {
      error = "more than five dimensions";
      return std::nullopt;
    }
    seen[idx(it->first)] = true;
    order[n++] = it->first;
    if (dash == std::string_view::npos) break;
    rest.remove_prefix(dash + 1);
  }
  if (n != kMeshDims) {
    std::string missing;
    for (const auto& [d, name] : kDimNames) {
      if (!seen[idx(d)]) missing += (missing.empty() ? "" : ", ") + std::string(name);
    }
    error = "must name all five dimensions; missing " + missing;
    return std::nullopt;
  }
  return order;
}

RankLayout::RankLayout(MeshShape shape, DimOrder order) : shape_(shape), order_(order) {
  size_[idx(MeshDim::tp)] = shape.tp;
  size_[idx(MeshDim::cp)] = shape.cp;
  size_[idx(MeshDim::ep)] = shape.ep;
  size_[idx(MeshDim::dp)] = shape.dp / shape.ep;
  size_[idx(MeshDim::pp)] = shape.pp;
  std::int64_t stride = 1;
  for (MeshDim d : order_) {
    stride_[idx(d)] = stride;
    stride *= size_[idx(d)];
  }
  world_ = stride;
}

RankLayout RankLayout::from_plan(const ParallelismConfig& par) {
  std::string error;
  const DimOrder order = parse_order(par.order, error).value_or(
      DimOrder{MeshDim::tp, MeshDim::cp, MeshDim::ep, MeshDim::dp, MeshDim::pp});
  return RankLayout({par.tensor_model_parallel_size, par.context_parallel_size, par.expert_model_parallel_size,
                     par.data_parallel_size, par.pipeline_model_parallel_size, par.num_distributed_optimizer_instances},
                    order);
}

std::int64_t RankLayout::get(const MeshCoord& c, MeshDim d) const {
  switch (d) {
    case MeshDim::tp: return c.tp;
    case MeshDim::cp: return c.cp;
    case MeshDim::ep: return c.ep;
    case MeshDim::dp: return c.edp;
    case MeshDim::pp: return c.pp;
  }
  return 0;
}

void RankLayout::set(MeshCoord& c, MeshDim d, std::int64_t v) {
  switch (d) {
    case MeshDim::tp: c.tp = v; break;
    case MeshDim::cp: c.cp = v; break;
    case MeshDim::ep: c.ep = v; break;
    case MeshDim::dp: c.edp = v; break;
    case MeshDim::pp: c.pp = v; break;
  }
}

MeshCoord RankLayout::coord(std::int64_t rank) const {
  MeshCoord c;
  for (MeshDim d : order_) set(c, d, (rank / stride(d)) % size(d));
  return c;
}

std::int64_t RankLayout::rank(const MeshCoord& c) const {
  std::int64_t r = 0;
  for (MeshDim d : order_) r += get(c, d) * stride(d);
  return r;
}

RankLayout::Few<MeshDim, kMeshDims> RankLayout::dims(GroupKind g) const {
  Few<MeshDim, kMeshDims> out;
  switch (g) {
    case GroupKind::tp: out.push_back(MeshDim::tp); break;
    case GroupKind::cp: out.push_back(MeshDim::cp); break;
    case GroupKind::ep: out.push_back(MeshDim::ep); break;
    case GroupKind::dp:
      out.push_back(MeshDim::ep);
      out.push_back(MeshDim::dp);
      break;
    case GroupKind::expert_dp:
    case GroupKind::expert_dp_shard:
    case GroupKind::expert_dp_replica:
      out.push_back(MeshDim::cp);
      out.push_back(MeshDim::dp);
      break;
    case GroupKind::pp: out.push_back(MeshDim::pp); break;
    case GroupKind::dp_cp:
    case GroupKind::dp_shard:
    case GroupKind::dp_replica:
      out.push_back(MeshDim::cp);
      out.push_back(MeshDim::ep);
      out.push_back(MeshDim::dp);
      break;
  }
  return out;
}

namespace {

bool is_shard(GroupKind g) { return g == GroupKind::dp_shard || g == GroupKind::expert_dp_shard; }
bool is_replica(GroupKind g) { return g == GroupKind::dp_replica || g == GroupKind::expert_dp_replica; }

}  // namespace

bool RankLayout::split(GroupKind whole, Digits& shard, Digits& replica) const {
  shard.clear();
  replica.clear();
  const auto group = dims(whole);
  Digits all;
  std::int64_t n = 1;
  for (MeshDim d : order_) {  // in increasing stride
    if (!group.contains(d)) continue;
    all.push_back({size(d), stride(d)});
    n *= size(d);
  }
  const std::int64_t instances = std::max<std::int64_t>(1, shape_.instances);
  if (n % instances != 0) {
    shard = all;
    return false;
  }
  std::int64_t rest = n / instances;  // members of an instance still to place
  for (const Digit& x : all) {
    if (rest == 1) {
      replica.push_back(x);
    } else if (rest % x.size == 0) {
      shard.push_back(x);
      rest /= x.size;
    } else if (x.size % rest == 0) {
      shard.push_back({rest, x.stride});
      replica.push_back({x.size / rest, x.stride * rest});
      rest = 1;
    } else {
      shard = all;
      replica.clear();
      return false;
    }
  }
  return true;
}

bool RankLayout::instance_split(GroupKind whole, std::string& why) const {
  Digits shard, replica;
  if (split(whole, shard, replica)) return true;
  const std::int64_t n = group_size(whole);
  if (n % std::max<std::int64_t>(1, shape_.instances) != 0) {
    why = "does not divide the " + std::string(to_string(whole)) + " group (" + std::to_string(n) + " ranks)";
  } else {
    why = "splits the " + std::string(to_string(whole)) + " group (" + std::to_string(n) +
          " ranks) inside one of its dimensions at a size that does not divide it; choose a divisor that follows the dimensions' sizes in `order`";
  }
  return false;
}

RankLayout::Digits RankLayout::varying(GroupKind g) const {
  if (is_shard(g) || is_replica(g)) {
    Digits shard, replica;
    split(g == GroupKind::dp_shard || g == GroupKind::dp_replica ? GroupKind::dp_cp : GroupKind::expert_dp, shard, replica);
    return is_shard(g) ? shard : replica;
  }
  Digits out;
  const auto group = dims(g);
  for (MeshDim d : order_) {
    if (group.contains(d)) out.push_back({size(d), stride(d)});
  }
  return out;
}

RankLayout::Digits RankLayout::fixed(GroupKind g) const {
  Digits out;
  const auto group = dims(g);
  for (MeshDim d : order_) {
    if (!group.contains(d)) out.push_back({size(d), stride(d)});
  }
  if (is_shard(g) || is_replica(g)) {
    Digits shard, replica;
    split(g == GroupKind::dp_shard || g == GroupKind::dp_replica ? GroupKind::dp_cp : GroupKind::expert_dp, shard, replica);
    const Digits& other = is_shard(g) ? replica : shard;
    for (const Digit& x : other) out.push_back(x);
    std::sort(out.begin(), out.end(), [](const Digit& a, const Digit& b) { return a.stride < b.stride; });
  }
  return out;
}

std::int64_t RankLayout::group_size(GroupKind g) const {
  std::int64_t n = 1;
  if (is_shard(g) || is_replica(g)) {
    for (const Digit& x : varying(g)) n *= x.size;
    return n;
  }
  // The group's dimensions' sizes, without their digits (the estimate asks eight groups'
  // sizes a plan, issue 18).
  for (const MeshDim d : dims(g)) n *= size(d);
  return n;
}

bool RankLayout::distinct(GroupKind g) const {
  if ((is_shard(g) || is_replica(g)) && shape_.instances <= 1) return false;
  return group_size(g) > 1;
}

std::int64_t RankLayout::group_index(GroupKind g, std::int64_t rank) const {
  std::int64_t index = 0;
  std::int64_t radix = 1;
  for (const Digit& x : fixed(g)) {
    index += (rank / x.stride) % x.size * radix;
    radix *= x.size;
  }
  return index;
}

std::int64_t RankLayout::rank_in_group(GroupKind g, std::int64_t rank) const {
  std::int64_t index = 0;
  std::int64_t radix = 1;
  for (const Digit& x : varying(g)) {
    index += (rank / x.stride) % x.size * radix;
    radix *= x.size;
  }
  return index;
}

std::vector<std::int64_t> RankLayout::group_members(GroupKind g, std::int64_t rank) const {
  const Digits vary = varying(g);
  std::int64_t base = rank;
  std::int64_t n = 1;
  for (const Digit& x : vary) {
    base -= (rank / x.stride) % x.size * x.stride;
    n *= x.size;
  }
  std::vector<std::int64_t> members;
  members.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t r = base;
    std::int64_t rest = i;
    for (const Digit& x : vary) {
      r += rest % x.size * x.stride;
      rest /= x.size;
    }
    members.push_back(r);
  }
  return members;  // ascending: the fastest-varying digit has the smallest stride
}

std::int64_t RankLayout::group_first(GroupKind g, std::int64_t index) const {
  std::int64_t r = 0;
  std::int64_t rest = index;
  for (const Digit& x : fixed(g)) {
    r += rest % x.size * x.stride;
    rest /= x.size;
  }
  return r;
}

std::int64_t RankLayout::group_span(GroupKind g) const {
  std::int64_t span = 0;
  for (const Digit& x : varying(g)) span += (x.size - 1) * x.stride;
  return span;
}

RankLayout::NodeSpan RankLayout::node_span(GroupKind g, std::int64_t gpus_per_node) const {
  NodeSpan out;
  const std::int64_t n = group_size(g);
  if (n <= 1 || gpus_per_node <= 0) return out;
  // Every digit of the rank, and whether the group spans it.
  Few<std::pair<Digit, bool>, 2 * (2 * kMeshDims + 2)> all;
  for (const Digit& x : varying(g)) all.push_back({x, true});
  for (const Digit& x : fixed(g)) all.push_back({x, false});
  // Each digit contributes the values that stay inside one node, from its own stride and size
  // alone: the order they come in does not matter.
  bool regular = true;
  std::int64_t per_node = 1;
  for (const auto& [x, spans] : all) {
    const std::int64_t lo = x.stride, hi = lo * x.size;
    std::int64_t inside = 1;
    if (hi <= gpus_per_node) {
      regular = regular && gpus_per_node % hi == 0;
      inside = x.size;
    } else if (lo < gpus_per_node) {
      regular = regular && gpus_per_node % lo == 0 && x.size % (gpus_per_node / lo) == 0;
      inside = gpus_per_node / lo;
    } else {
      regular = regular && lo % gpus_per_node == 0;
    }
    if (spans) per_node *= inside;
  }
  if (world_ <= gpus_per_node) return {n, 1};
  if (regular) return {per_node, n / per_node};
  const std::int64_t groups = std::min<std::int64_t>(num_groups(g), 64);
  std::vector<std::int64_t> nodes;
  for (std::int64_t i = 0; i < groups; ++i) {
    nodes.clear();
    for (const auto r : group_members(g, group_first(g, i))) nodes.push_back(r / gpus_per_node);
    std::sort(nodes.begin(), nodes.end());
    const auto distinct = static_cast<std::int64_t>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
    out.nodes = std::max(out.nodes, distinct);
  }
  out.per_node = std::max<std::int64_t>(1, n / out.nodes);
  return out;
}

std::vector<std::int64_t> RankLayout::group(GroupKind g, std::int64_t index) const {
  return group_members(g, group_first(g, index));
}

std::int64_t ring_successor(const std::vector<std::int64_t>& members, std::size_t pos, std::int64_t per_node, std::int64_t gpus_per_node) {
  const std::size_t n = members.size();
  const auto k = static_cast<std::size_t>(std::max<std::int64_t>(per_node, 1));
  const std::int64_t per = std::max<std::int64_t>(gpus_per_node, 1);
  const bool crosses = members.front() / per != members.back() / per;
  if (!crosses || k <= 1 || n % k != 0) return members[(pos + 1) % n];
  // Members ascend, so a node's k members are consecutive when placement is regular.
  for (std::size_t b = 0; b < n; b += k) {
    if (members[b] / per != members[b + k - 1] / per) return members[(pos + 1) % n];
  }
  return members[(pos + k) % n];
}

}  // namespace meshwork::plan
