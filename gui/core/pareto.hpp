#pragma once
// The Pareto front of plans that trade time to train against cost: the points no other point
// beats on both (Deb 2001, "Multi-objective optimization", §2.4: non-dominated set).

#include <cstddef>
#include <vector>

namespace meshwork::gui {

struct CostPoint {
  double time_s = 0;
  double cost = 0;
};

// Indices of the non-dominated points, by increasing time. A point is dominated when another is
// no worse on both and better on one; equal points are kept once (the first).
std::vector<std::size_t> pareto_front(const std::vector<CostPoint>& points);

}  // namespace meshwork::gui
