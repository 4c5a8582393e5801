#include "models/nccl_tests.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "models/comm.hpp"
#include "models/hardware.hpp"
#include "plan/enums.hpp"

namespace meshwork::models {

namespace {

std::vector<std::string> tokens_of(std::string_view line) {
  std::vector<std::string> out;
  std::istringstream in{std::string(line)};
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool all_digits(const std::string& s) { return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }); }

double number(const std::string& s, const std::string& where, const char* column) {
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || !std::isfinite(v)) {
    throw std::invalid_argument(where + ": the " + std::string(column) + " column reads '" + s + "', not a number");
  }
  return v;
}

// "all_reduce_perf" -> "all_reduce".
std::string test_name(std::string_view perf) {
  std::string s(perf);
  if (s.size() > 5 && s.ends_with("_perf")) s.resize(s.size() - 5);
  return s;
}

struct Pending {
  NcclTestBlock block;
  std::set<std::int64_t> ranks;
  std::set<std::string> hosts;
  std::string redop;
  std::string root;  // "-1" for the collectives without a root (all-reduce, reduce-scatter, ...)
  std::size_t root_i = 0;  // 0: no root column
  // Column positions of the out-of-place time, algbw and busbw (nccl-tests 2.x with its root
  // column; older outputs have none and one fewer column before them).
  std::size_t time_i = 5, algbw_i = 6, busbw_i = 7;
  bool header_seen = false;
};

// Without a "Collective test starting" line: an all-reduce's busbw is 2(n-1)/n of its algbw, a
// reduce-scatter's (n-1)/n, both with a sum (nccl-tests' doc/PERFORMANCE.md).
std::string inferred(const Pending& p) {
  const auto n = static_cast<double>(p.ranks.size());
  // A reduce also sums, with busbw = algbw: with 2 ranks that is an all-reduce's ratio, with
  // over 50 a reduce-scatter's within the tolerance. Its root column names a rank, theirs -1; an
  // output without the column is not guessed at.
  if (n < 2 || p.redop != "sum" || p.root_i == 0 || p.root != "-1") return "";
  const auto last = std::max_element(p.block.points.begin(), p.block.points.end(),
                                      [](const NcclTestPoint& a, const NcclTestPoint& b) { return a.bytes < b.bytes; });
  if (last == p.block.points.end() || last->algbw_bytes_per_s <= 0) return "";
  const double ratio = last->busbw_bytes_per_s / last->algbw_bytes_per_s;
  if (std::abs(ratio - 2 * (n - 1) / n) < 0.02) return "all_reduce";
  if (std::abs(ratio - (n - 1) / n) < 0.02) return "reduce_scatter";
  return "";
}

}  // namespace

std::vector<NcclTestBlock> parse_nccl_tests(std::string_view text, const std::string& name) {
  std::vector<NcclTestBlock> out;
  Pending cur;
  auto finish = [&] {
    if (!cur.block.points.empty()) {
      cur.block.ranks = static_cast<std::int64_t>(cur.ranks.size());
      cur.block.nodes = static_cast<std::int64_t>(cur.hosts.size());
      if (cur.block.collective.empty()) cur.block.collective = inferred(cur);
      out.push_back(std::move(cur.block));
    }
    cur = Pending{};
  };
  std::size_t line_no = 0;
  for (std::size_t begin = 0; begin <= text.size();) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    const bool comment = !line.empty() && line.find_first_not_of(" \t") != std::string_view::npos && line[line.find_first_not_of(" \t")] == '#';
    auto t = tokens_of(line);
    if (!t.empty() && t.front() == "#") t.erase(t.begin());
    else if (!t.empty() && t.front().starts_with('#')) t.front().erase(0, 1);
    if (t.empty()) continue;
    const std::string where = name + ":" + std::to_string(line_no);
    // "# Collective test starting: all_reduce_perf" opens a block.
    if (t.size() >= 4 && t[0] == "Collective" && t[1] == "test" && t[2] == "starting:") {
      finish();
      cur.block.collective = test_name(t[3]);
      continue;
    }
    // "#  Rank  3 Group  0 Pid 4180129 on cnode3-002 device  3 [...] NVIDIA H100 80GB HBM3".
    if (t.size() >= 2 && t[0] == "Rank" && all_digits(t[1])) {
      if (!cur.block.points.empty()) finish();  // a second test's ranks without its own "starting" line
      std::int64_t rank = 0;
      const auto [rank_end, rank_ec] = std::from_chars(t[1].data(), t[1].data() + t[1].size(), rank);
      if (rank_ec != std::errc{} || rank_end != t[1].data() + t[1].size()) throw std::invalid_argument(where + ": rank '" + t[1] + "' is not a rank number");
      cur.ranks.insert(rank);
      const auto on = std::find(t.begin(), t.end(), "on");
      if (on != t.end() && on + 1 != t.end()) cur.hosts.insert(*(on + 1));
      continue;
    }
    // The column header: "size count type redop root time algbw busbw #wrong time ...".
    if (t.size() >= 4 && t[0] == "size" && t[1] == "count") {
      if (!cur.block.points.empty()) {
        // A new table under the same ranks (no rank lines between): keep them.
        auto ranks = cur.ranks;
        auto hosts = cur.hosts;
        finish();
        cur.ranks = std::move(ranks);
        cur.hosts = std::move(hosts);
      }
      const auto first = [&](const char* column, std::size_t fallback) {
        const auto it = std::find(t.begin(), t.end(), column);
        return it == t.end() ? fallback : static_cast<std::size_t>(it - t.begin());
      };
      cur.root_i = first("root", 0);
      cur.time_i = first("time", 5);
      cur.algbw_i = first("algbw", cur.time_i + 1);
      cur.busbw_i = first("busbw", cur.time_i + 2);
      cur.header_seen = true;
      cur.block.where = where;
      continue;
    }
    // A row: a size in bytes first. Comments never hold rows.
    if (comment || !all_digits(t[0])) continue;
    if (!cur.header_seen) {
      // No header: nccl-tests 2.x has a root column (13 columns), older ones do not.
      cur.time_i = t.size() >= 13 ? 5 : 4;
      cur.root_i = t.size() >= 13 ? 4 : 0;
      cur.algbw_i = cur.time_i + 1;
      cur.busbw_i = cur.time_i + 2;
      cur.header_seen = true;
      cur.block.where = where;
    }
    if (t.size() <= cur.busbw_i) {
      throw std::invalid_argument(where + ": a row of " + std::to_string(t.size()) + " columns; the out-of-place busbw is column " +
                                  std::to_string(cur.busbw_i + 1));
    }
    NcclTestPoint pt;
    pt.bytes = number(t[0], where, "size");
    pt.time_s = number(t[cur.time_i], where, "time (us)") * 1e-6;
    pt.algbw_bytes_per_s = number(t[cur.algbw_i], where, "algbw (GB/s)") * 1e9;
    pt.busbw_bytes_per_s = number(t[cur.busbw_i], where, "busbw (GB/s)") * 1e9;
    if (pt.time_s <= 0) throw std::invalid_argument(where + ": a time of " + t[cur.time_i] + " us");
    if (t.size() > 3 && cur.redop.empty()) cur.redop = t[3];
    if (cur.root_i > 0 && cur.root_i < t.size() && cur.root.empty()) cur.root = t[cur.root_i];
    cur.block.points.push_back(pt);
  }
  finish();
  if (out.empty()) throw std::invalid_argument(name + ": no nccl-tests table (rows of size, count, type, redop, root, time, algbw, busbw)");
  return out;
}

LatencyBandwidth fit_latency_bandwidth(const std::vector<NcclTestPoint>& points) {
  std::set<double> sizes;
  for (const auto& p : points)
    if (p.bytes > 0 && p.time_s > 0) sizes.insert(p.bytes);
  if (sizes.size() < 2) {
    throw std::invalid_argument("a latency and bandwidth fit needs two different sizes above 0 bytes, got " + std::to_string(sizes.size()));
  }
  // Minimise sum ((a + b S - t) / t)^2 over a and b = 1 / B: with u = 1/t and v = S/t the
  // residual is a u + b v - 1, a linear least-squares problem (normal equations, 2 x 2).
  double uu = 0, uv = 0, vv = 0, su = 0, sv = 0;
  for (const auto& p : points) {
    if (p.bytes <= 0 || p.time_s <= 0) continue;
    const double u = 1 / p.time_s, v = p.bytes / p.time_s;
    uu += u * u;
    uv += u * v;
    vv += v * v;
    su += u;
    sv += v;
  }
  LatencyBandwidth fit;
  const double det = uu * vv - uv * uv;
  double a = det != 0 ? (su * vv - sv * uv) / det : 0;
  double b = det != 0 ? (uu * sv - uv * su) / det : 0;
  if (a < 0 || b <= 0) {  // no latency term fits better than a negative one: bandwidth alone
    a = 0;
    b = sv / vv;
  }
  fit.latency_s = a;
  fit.algbw_bytes_per_s = 1 / b;
  return fit;
}

namespace {

Collective model_collective(const std::string& name) {
  if (name == "all_reduce") return Collective::all_reduce;
  if (name == "all_gather") return Collective::all_gather;
  if (name == "reduce_scatter") return Collective::reduce_scatter;
  if (name == "alltoall") return Collective::all_to_all;
  return Collective::none;
}

// The plan's cluster with one group of the block's shape: `ranks` members, `per_node` of them
// in each of `nodes` nodes (TP = gpus_per_node / per_node puts consecutive DP members on
// different nodes, as the test's ranks are).
plan::Plan group_plan(const plan::Plan& plan, const NcclTestBlock& b) {
  const std::int64_t gpn = std::max<std::int64_t>(1, plan.cluster.gpus_per_node);
  if (b.nodes < 1 || b.ranks % b.nodes != 0) {
    throw std::invalid_argument(b.where + ": " + std::to_string(b.ranks) + " ranks on " + std::to_string(b.nodes) + " hosts do not spread evenly");
  }
  const std::int64_t per_node = b.ranks / b.nodes;
  if (per_node > gpn || gpn % per_node != 0) {
    throw std::invalid_argument(b.where + ": " + std::to_string(per_node) + " ranks per host do not fit the plan's cluster.gpus_per_node " + std::to_string(gpn));
  }
  plan::Plan q = plan;
  q.parallelism = {};
  q.parallelism.tensor_model_parallel_size = gpn / per_node;
  q.parallelism.data_parallel_size = b.ranks;
  q.cluster.num_gpus = q.parallelism.tensor_model_parallel_size * b.ranks;
  return q;
}

GroupNetwork network(plan::Plan q, const std::string& field, double efficiency) {
  if (efficiency > 0) {
    auto& k = q.cluster.gpu.calibration;
    (field == "nic_efficiency" ? k.nic_efficiency : k.intra_node_efficiency) = efficiency;
  }
  return group_network(q, hardware_profile(q.cluster.gpu), plan::GroupKind::dp);
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

namespace {

std::size_t distinct_sizes(const NcclTestBlock& b) {
  std::set<double> sizes;
  for (const auto& p : b.points)
    if (p.bytes > 0) sizes.insert(p.bytes);
  return sizes.size();
}

// One block against the plan as it stands: its fit, and the efficiency `field` for which the
// model's collective takes the largest size's measured time.
BlockCalibration calibrate_block(const plan::Plan& plan, const NcclTestBlock& b) {
  BlockCalibration r;
  r.block = &b;
  if (distinct_sizes(b) < 2) {
    r.why = "fewer than two different sizes: no latency and bandwidth to fit";
    return r;
  }
  r.fit = fit_latency_bandwidth(b.points);
  const Collective c = model_collective(b.collective);
  if (c == Collective::none) {
    r.why = b.collective.empty() ? "the collective is not named (no '# Collective test starting' line) and its columns do not tell"
                                 : "'" + b.collective + "' is not a collective the cost model prices from a fabric's efficiency";
    return r;
  }
  if (b.ranks < 2) {
    r.why = "one rank: no fabric crossed";
    return r;
  }
  const plan::Plan q = group_plan(plan, b);
  r.field = b.nodes > 1 ? "nic_efficiency" : "intra_node_efficiency";
  const auto largest = *std::max_element(b.points.begin(), b.points.end(), [](auto& x, auto& y) { return x.bytes < y.bytes; });
  // The algorithm the model runs the largest size with, on the plan's fabric as it stands; the
  // efficiency is solved for that algorithm (letting the choice move with the efficiency would
  // credit one algorithm's measurement to another's rate). The model's time falls as the
  // efficiency rises: bisection in log space for the one that gives the measured time of the
  // largest size, where latency weighs least. At most 2: the schema's largest.
  const CollectiveAlgorithm a = algorithm_for(network(q, r.field, 0), c, largest.bytes);
  const std::string algorithm(plan::to_string(a));
  constexpr double kLow = 0.01, kHigh = 2.0;
  auto time_at = [&](double e) { return collective_s(network(q, r.field, e), c, largest.bytes, a); };
  const double slow = time_at(kLow), fast = time_at(kHigh);
  if (std::abs(slow - fast) <= 1e-9 * largest.time_s) {
    const double model = collective_s(network(q, r.field, 0), c, largest.bytes, a);
    r.why = "the cost model runs it with " + algorithm + ", whose rate is the generation's, not " + r.field + " (" + fixed(model * 1e6, 0) +
            " us against the measured " + fixed(largest.time_s * 1e6, 0) + " us at the largest size)";
    r.field.clear();
    return r;
  }
  if (largest.time_s < fast || largest.time_s > slow) {
    r.why = "no " + r.field + " in [" + fixed(kLow, 2) + ", " + fixed(kHigh, 2) + "] makes the model's " + algorithm + " take the measured " +
            fixed(largest.time_s * 1e6, 0) + " us at the largest size";
    r.field.clear();
    return r;
  }
  double lo = std::log(kLow), hi = std::log(kHigh);
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (time_at(std::exp(mid)) > largest.time_s ? lo : hi) = mid;
  }
  r.efficiency = std::exp((lo + hi) / 2);
  return r;
}

// The model against every size of the block: with the plan's final calibration, and with the
// block's own efficiency in place of the lowest.
void measure_errors(const plan::Plan& plan, BlockCalibration& r) {
  const NcclTestBlock& b = *r.block;
  const plan::Plan q = group_plan(plan, b);
  const Collective c = model_collective(b.collective);
  auto worst = [&](const GroupNetwork& g, double& error, double& bytes) {
    for (const auto& p : b.points) {
      if (p.bytes <= 0 || p.time_s <= 0) continue;  // nothing moved, or no time to compare with
      const double e = std::abs(collective_s(g, c, p.bytes) - p.time_s) / p.time_s;
      if (e > error) error = e, bytes = p.bytes;
    }
  };
  worst(network(q, r.field, 0), r.max_error, r.max_error_bytes);
  worst(network(q, r.field, r.field.empty() ? 0 : r.efficiency), r.own_max_error, r.own_max_error_bytes);
}

}  // namespace

NcclCalibration calibrate_from_nccl_tests(const plan::Plan& plan, const std::vector<NcclTestBlock>& blocks) {
  NcclCalibration out;
  out.plan = plan;
  // The node fabric's latency first (the efficiencies are solved with it): from a block inside
  // one node that reaches small messages, its fitted latency over a ring's steps. A fit whose
  // latency came out 0 (bandwidth alone fitted better) says nothing of it. On a GPU the
  // collectives take NCCL's tuner's latencies per protocol (models/nccl_tuner), which a single
  // latency + bandwidth line across its protocols would only blur: the plan's stays.
  double latency_s = -1;
  const bool nccl = hardware_profile(plan.cluster.gpu).nccl;
  for (const auto& b : blocks) {
    if (nccl) break;
    const Collective c = model_collective(b.collective);
    if (b.nodes != 1 || b.ranks < 2 || c == Collective::none || c == Collective::all_to_all || distinct_sizes(b) < 2) continue;
    const double smallest = std::min_element(b.points.begin(), b.points.end(), [](auto& x, auto& y) { return x.bytes < y.bytes; })->bytes;
    if (smallest > 64 * 1024) continue;
    const double steps = static_cast<double>(c == Collective::all_reduce ? 2 * (b.ranks - 1) : b.ranks - 1);
    const double l = fit_latency_bandwidth(b.points).latency_s / steps;
    if (l <= 0) continue;
    latency_s = latency_s < 0 ? l : std::min(latency_s, l);
  }
  if (latency_s > 0) out.plan.cluster.intra_node.latency_us = latency_s * 1e6;

  // Inside a node first, then across nodes with the node's efficiency set: a ring between nodes
  // runs at the lower of the NIC's and NVLink's rates (models/comm), so the NIC's is solved
  // against the calibrated node. Each field takes the lowest any block gave.
  std::vector<BlockCalibration> results(blocks.size());
  for (const bool across : {false, true}) {
    double lowest = -1;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if ((blocks[i].nodes > 1) != across) continue;
      results[i] = calibrate_block(out.plan, blocks[i]);
      if (!results[i].field.empty()) lowest = lowest < 0 ? results[i].efficiency : std::min(lowest, results[i].efficiency);
    }
    if (lowest > 0) (across ? out.plan.cluster.gpu.calibration.nic_efficiency : out.plan.cluster.gpu.calibration.intra_node_efficiency) = lowest;
  }
  // How far the plan as written, with both fields, is on every size of every block the model
  // prices (those that set nothing included: NVLink SHARP's all-reduce at the generation's rate).
  for (auto& r : results) {
    const NcclTestBlock& b = *r.block;
    if (model_collective(b.collective) != Collective::none && b.ranks >= 2 && distinct_sizes(b) >= 2) measure_errors(out.plan, r);
  }
  out.blocks = std::move(results);
  return out;
}

}  // namespace meshwork::models
