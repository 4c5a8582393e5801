#include "models/end_of_step.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace meshwork::models {

std::vector<double> end_of_step(const std::vector<double>& start_s,
                                const std::function<double(std::size_t k, const std::vector<char>& running)>& seconds,
                                const StagesMet& meets) {
  const std::size_t P = start_s.size();
  for (std::size_t k = 0; k < P; ++k) {
    if (!std::isfinite(start_s[k]) || start_s[k] < 0) throw std::invalid_argument("end_of_step: stage " + std::to_string(k) + " starts at a negative or non-finite time");
  }
  const bool listed = !meets.first.empty();
  if (listed && (meets.first.size() != P + 1 || meets.first.front() != 0 || meets.first.back() != meets.stages.size() ||
                 !std::is_sorted(meets.first.begin(), meets.first.end()))) {
    throw std::invalid_argument("end_of_step: meets does not list " + std::to_string(P) + " stages in order");
  }
  std::vector<double> end(P, 0.0);
  if (P == 0) return end;
  // Whose pace a stage's start or end changes (those that meet it), by counting sort.
  std::vector<std::size_t> affected_first(listed ? P + 1 : 0, 0), affected;
  if (listed) {
    for (const std::size_t j : meets.stages) {
      if (j >= P) throw std::invalid_argument("end_of_step: meets names stage " + std::to_string(j) + " of " + std::to_string(P));
      ++affected_first[j + 1];
    }
    std::partial_sum(affected_first.begin(), affected_first.end(), affected_first.begin());
    affected.resize(meets.stages.size());
    std::vector<std::size_t> at(affected_first.begin(), affected_first.end() - 1);
    for (std::size_t k = 0; k < P; ++k) {
      for (std::size_t i = meets.first[k]; i < meets.first[k + 1]; ++i) affected[at[meets.stages[i]]++] = k;
    }
  }
  // Stages in the order they start (ties by index: deterministic).
  std::vector<std::size_t> order(P);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return start_s[a] < start_s[b]; });
  std::vector<double> left(P, 1.0);  // of each stage's collectives, the fraction still to run
  std::vector<double> pace(P, 0.0);  // their seconds beside those running now
  std::vector<std::size_t> running, ended;
  running.reserve(P);
  ended.reserve(P);
  std::vector<char> is_running(P, 0), dirty(P, 0);
  auto touch = [&](std::size_t j) {
    if (!listed) {
      for (const std::size_t k : running) dirty[k] = 1;
      return;
    }
    for (std::size_t i = affected_first[j]; i < affected_first[j + 1]; ++i) dirty[affected[i]] = 1;
  };
  std::size_t next = 0;  // in `order`, the next stage to start
  double now = start_s[order[0]];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  while (next < P || !running.empty()) {
    // Stages that start now.
    while (next < P && start_s[order[next]] <= now) {
      const std::size_t k = order[next++];
      is_running[k] = 1;
      running.push_back(k);
      touch(k);
      dirty[k] = 1;
    }
    if (running.empty()) {
      now = start_s[order[next]];
      continue;
    }
    // Until the next start or the first of the running to end, each at its pace beside those
    // running now; one with nothing to run ends at once.
    double step = next < P ? start_s[order[next]] - now : kInf;
    std::size_t first = P;  // the stage that ends at now + step, if one does before the next start
    for (const std::size_t k : running) {
      if (dirty[k]) {
        pace[k] = seconds(k, is_running);
        if (!std::isfinite(pace[k]) || pace[k] < 0) throw std::invalid_argument("end_of_step: stage " + std::to_string(k) + " has negative or non-finite seconds");
        dirty[k] = 0;
      }
      const double dt = left[k] * pace[k];
      if (dt < step) {
        step = dt;
        first = k;
      }
    }
    for (const std::size_t k : running) left[k] = pace[k] > 0 ? left[k] - step / pace[k] : 0.0;
    now += step;
    if (first < P) left[first] = 0;
    // The stage found first, and any other that ends within rounding of it.
    std::erase_if(running, [&](std::size_t k) {
      if (left[k] > 1e-12) return false;
      end[k] = now;
      is_running[k] = 0;
      ended.push_back(k);
      return true;
    });
    for (const std::size_t k : ended) touch(k);
    ended.clear();
  }
  return end;
}

std::vector<double> dp_end_of_step(const plan::Plan& p, const DpNetworks& nets, const AfterLastItem& work, CollectivePrices& price,
                                   const std::vector<double>& start_s, const std::vector<double>& scale) {
  const std::size_t P = start_s.size();
  if (scale.size() != P) throw std::invalid_argument("dp_end_of_step: start_s and scale differ in length");
  const std::array<const GroupNetwork*, 4> groups{&nets.dense, &nets.expert, &nets.dense_replica, &nets.expert_replica};
  // Per group with per-stage figures, a table of the pairs' shares ([k * P + j]; [k * P + k]
  // alone), as stage_pair_nic_bytes_per_s gives them, row by row; the others at their group's.
  std::array<std::vector<double>, 4> pair_rates;
  std::array<double, 4> fixed{};
  for (std::size_t n = 0; n < groups.size(); ++n) {
    const GroupNetwork& g = *groups[n];
    fixed[n] = g.nic_bytes_per_s;
    if (g.stage_fabric_fractions.size() != P) continue;
    pair_rates[n].resize(P * P);
    for (std::size_t k = 0; k < P; ++k) {
      double* row = pair_rates[n].data() + k * P;
      for (std::size_t j = 0; j < P; ++j) row[j] = stage_pair_nic_bytes_per_s(g, static_cast<std::int64_t>(k), static_cast<std::int64_t>(j));
    }
  }
  // Per stage, the stages beside which one of its groups runs slower than alone (a neighbour or
  // two on the fabric).
  StagesMet meets;
  meets.first.reserve(P + 1);
  meets.first.push_back(0);
  for (std::size_t k = 0; k < P; ++k) {
    for (std::size_t j = 0; j < P; ++j) {
      bool slower = false;
      for (const auto& rates : pair_rates) slower = slower || (!rates.empty() && rates[k * P + j] < rates[k * P + k]);
      if (slower) meets.stages.push_back(j);
    }
    meets.first.push_back(meets.stages.size());
  }
  // Priced once per distinct set of shares (most stages share theirs), and per stage its last.
  std::vector<std::pair<std::array<double, 4>, double>> priced;
  std::vector<std::array<double, 4>> last_rates(P, std::array<double, 4>{-1, -1, -1, -1});
  std::vector<double> last_s(P, 0.0);
  auto seconds = [&](std::size_t k, const std::vector<char>& running) {
    std::array<double, 4> rate = fixed;
    for (std::size_t n = 0; n < groups.size(); ++n) {
      if (pair_rates[n].empty()) continue;
      const double* row = pair_rates[n].data() + k * P;
      double least = row[k];
      for (std::size_t i = meets.first[k]; i < meets.first[k + 1]; ++i) {
        if (running[meets.stages[i]]) least = std::min(least, row[meets.stages[i]]);
      }
      rate[n] = least;
    }
    if (rate == last_rates[k]) return last_s[k];
    const auto known = std::find_if(priced.begin(), priced.end(), [&](const auto& e) { return e.first == rate; });
    const double whole =
        known != priced.end() ? known->second
                              : priced.emplace_back(rate, after_last_item_s(p, nets, work, price, {rate[0], rate[1], rate[2], rate[3]})).second;
    last_rates[k] = rate;
    return last_s[k] = scale[k] * whole;
  };
  return end_of_step(start_s, seconds, meets);
}

}  // namespace meshwork::models
