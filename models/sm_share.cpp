#include "models/sm_share.hpp"

#include <algorithm>

namespace meshwork::models {

double sm_fraction(const HardwareProfile& hw, Stream stream, Collective c, bool tp_split) {
  if (stream == Stream::compute) return 0;
  if (tp_split && stream == Stream::tp) return c == Collective::all_gather ? 0.0 : hw.tp_overlap_sm_fraction;
  return hw.collective_sm_fraction;
}

double slowed_compute_s(double work_s, double overlap_s, double fraction) {
  if (work_s <= 0) return 0;
  const double f = std::clamp(fraction, 0.0, kMostSmsHeld);
  if (f <= 0 || overlap_s <= 0) return work_s;
  const double rate = 1 - f;
  // Done inside the overlap at the slower rate, or the overlap's share and then the rest.
  if (rate > 0 && work_s <= overlap_s * rate) return work_s / rate;
  return overlap_s + (work_s - overlap_s * rate);
}

double tp_exposed_s(double comm_s, double gemm_s, double fraction) {
  return std::max(0.0, std::max(comm_s, slowed_compute_s(gemm_s, comm_s, fraction)) - gemm_s);
}

double split_exposed_s(double comm_s, double attention_s, double cp, double fraction) {
  return tp_exposed_s(comm_s, attention_s * (cp - 1) / cp, fraction);
}

void SharedSms::busy(double start_s, double end_s) {
  if (end_s > start_s && fraction_ > 0) spans_.emplace_back(start_s, end_s);
}

double SharedSms::run_beside(double start_s, double work_s) {
  while (first_ < spans_.size() && spans_[first_].second <= start_s) ++first_;
  return run_from(first_, start_s, work_s, std::clamp(fraction_, 0.0, kMostSmsHeld));
}

double SharedSms::run_at(double start_s, double work_s, double fraction) const {
  if (work_s <= 0 || !(fraction > 0) || idle_from(start_s)) return start_s + std::max(0.0, work_s);
  const auto first = std::partition_point(spans_.begin(), spans_.end(), [&](const std::pair<double, double>& s) { return s.second <= start_s; });
  return run_from(static_cast<std::size_t>(first - spans_.begin()), start_s, work_s, std::min(fraction, 1 - 1e-9));
}

double SharedSms::run_from(std::size_t first, double start_s, double work_s, double fraction) const {
  const double rate = 1 - fraction;
  double t = start_s, left = work_s;
  for (std::size_t i = first; i < spans_.size() && left > 0; ++i) {
    const auto [a, b] = spans_[i];
    if (t < a) {  // at full speed until the collective starts
      if (left <= a - t) return t + left;
      left -= a - t;
      t = a;
    }
    // Done inside the collective at the slower rate, or its share there and the rest after
    // (slowed_compute_s, at a fraction already held to its bound).
    const double inside = b - t;
    if (left <= inside * rate) return t + left / rate;
    left -= inside * rate;
    t = b;
  }
  return t + left;
}

}  // namespace meshwork::models
