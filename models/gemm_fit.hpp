#pragma once
// A GEMM's efficiency against its size, eff(macs) = max macs / (macs + half) (models::gemm_efficiency),
// fitted on measurements: a GPU generation's microbenchmark table (docs/reference/gemm) for its
// hardware profile, or the machine at hand's own GEMMs (`meshwork calibrate`).
//
// The curve prices a GEMM at 2 (macs + half) / (peak max) seconds: a fixed part, the launch,
// fill and drain of the SMs, and one proportional to its work. Below the half size the fixed
// part dominates, and a GEMM takes between 2 half / (peak max) and twice that.
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
// asymptote alone; until 2026-12-06 `meshwork calibrate` fitted the residuals unweighted, which
// on XLA's H100 table gives an asymptote of 0.43 where the weighted fit gives 0.77). half is at
// least 1 where a curve is fitted: where the points show no size dependence (one size, or noise
// a falling one), efficiency is flat, and 0 would read as "not calibrated" in a plan. No usable
// point (positive and finite): {0, 0}, nothing calibrated.
GemmCurve fit_gemm_curve(const std::vector<std::pair<double, double>>& macs_and_efficiency);

// The half size alone, max_efficiency given (a generation's best measured matmul at large shapes,
// docs/reference/published-runs.md C3): the same weighted least squares with one unknown. A
// table whose largest shapes do not yet saturate the GPU (B200's, below 4096 in every dimension)
// cannot fix the asymptote; the large-shape microbenchmark does, and the table the size at which
// a GEMM falls to half of it.
double fit_gemm_half_macs(const std::vector<std::pair<double, double>>& macs_and_efficiency, double max_efficiency);

// One measured GEMM: its shape (m x k times k x n) and throughput.
struct GemmMeasurement {
  std::int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // 2 m n k / seconds
  [[nodiscard]] double macs() const { return static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// Reads a GEMM table: lines `m,n,k,flops_per_s` (spaces around fields and CRLF allowed); lines
// starting with '#' and a header line (`m,...`) skipped. On a missing file or any malformed line,
// returns nothing and says what in `error`, a line for each (the file, the line number, the
// field); on success `error` is empty.
std::vector<GemmMeasurement> read_gemm_table(const std::filesystem::path& file, std::string& error);

// A table's points as (multiply-adds, efficiency against `peak_flops_per_s`).
std::vector<std::pair<double, double>> gemm_efficiencies(const std::vector<GemmMeasurement>& table, double peak_flops_per_s);

}  // namespace meshwork::models
