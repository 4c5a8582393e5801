#include "models/end_of_step.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace meshwork::models {

std::vector<double> end_of_step(const std::vector<double>& start_s,
                                const std::function<double(std::size_t k, const std::vector<char>& running)>& seconds) {
  const std::size_t P = start_s.size();
  for (std::size_t k = 0; k < P; ++k) {
    if (!std::isfinite(start_s[k]) || start_s[k] < 0) throw std::invalid_argument("end_of_step: stage " + std::to_string(k) + " starts at a negative or non-finite time");
  }
  std::vector<double> end(P, 0.0);
  if (P == 0) return end;
  // Stages in the order they start (ties by index: deterministic).
  std::vector<std::size_t> order(P);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return start_s[a] < start_s[b]; });
  std::vector<double> left(P, 1.0);  // of each stage's collectives, the fraction still to run
  std::vector<double> pace(P, 0.0);  // their seconds beside those running now
  std::vector<std::size_t> running;
  std::vector<char> is_running(P, 0);
  std::size_t next = 0;  // in `order`, the next stage to start
  double now = start_s[order[0]];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  auto checked = [&](std::size_t k) {
    const double s = seconds(k, is_running);
    if (!std::isfinite(s) || s < 0) throw std::invalid_argument("end_of_step: stage " + std::to_string(k) + " has negative or non-finite seconds");
    return s;
  };
  while (next < P || !running.empty()) {
    // Stages that start now.
    while (next < P && start_s[order[next]] <= now) {
      is_running[order[next]] = 1;
      running.push_back(order[next++]);
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
      pace[k] = checked(k);
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
      return true;
    });
  }
  return end;
}

}  // namespace meshwork::models
