#include "gui/core/pareto.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace meshwork::gui {

std::vector<std::size_t> pareto_front(const std::vector<CostPoint>& points) {
  std::vector<std::size_t> order(points.size());
  std::iota(order.begin(), order.end(), 0);
  // By time, then cost, then index: a sweep keeps each point cheaper than every faster one.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (points[a].time_s != points[b].time_s) return points[a].time_s < points[b].time_s;
    return points[a].cost < points[b].cost;
  });
  std::vector<std::size_t> front;
  double cheapest = std::numeric_limits<double>::infinity();
  for (const std::size_t i : order) {
    if (points[i].cost < cheapest) {
      front.push_back(i);
      cheapest = points[i].cost;
    }
  }
  return front;
}

}  // namespace meshwork::gui
