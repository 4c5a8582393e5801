#pragma once
// A GEMM's efficiency against its size, eff(macs) = max macs / (macs + half) (models::gemm_efficiency),
// fitted on measurements: a GPU generation's microbenchmark table (docs/reference/gemm) for its
// hardware profile, or the machine at hand's own GEMMs (`meshwork calibrate`). One fit for both.
//
// The half size reads as a fixed time per GEMM: below it a GEMM takes about 2 half / (peak max)
// whatever its size (launch, fill and drain of the SMs).
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace meshwork::models {

struct GemmCurve {
  double max_efficiency = 0;  // of the peak the efficiencies were measured against
  double half_macs = 0;       // multiply-adds at which a GEMM reaches half of max_efficiency
  [[nodiscard]] double efficiency(double macs) const { return macs > 0 ? max_efficiency * macs / (macs + half_macs) : max_efficiency; }
};

// Least squares on 1/eff = 1/max + (half/max) / macs, each point's residual relative to its 1/eff
// (so that the small GEMMs, whose 1/eff is a hundred times the large ones', do not decide the
// asymptote alone). half is at least 1: where the points show no size dependence (or noise a
// falling one), efficiency is flat, and 0 would read as "not calibrated" in a plan.
GemmCurve fit_gemm_curve(const std::vector<std::pair<double, double>>& macs_and_efficiency);

// One measured GEMM: its shape (m x k times k x n) and throughput.
struct GemmMeasurement {
  std::int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // 2 m n k / seconds
  [[nodiscard]] double macs() const { return static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// Reads a GEMM table: lines `m,n,k,flops_per_s`; lines starting with '#' and a header line
// (`m,...`) skipped. On a missing file or a malformed line, returns nothing and says which in
// `error` (the file, the line number and the field).
std::vector<GemmMeasurement> read_gemm_table(const std::filesystem::path& file, std::string& error);

// The curve of a table against `peak_flops_per_s`.
GemmCurve fit_gemm_table(const std::vector<GemmMeasurement>& table, double peak_flops_per_s);

}  // namespace meshwork::models
