#include "models/attention_kernels.hpp"

#include <cmath>
#include <map>
#include <optional>

#include "models/csv_table.hpp"
#include "models/gemm_fit.hpp"

namespace meshwork::models {

std::vector<AttentionMeasurement> read_attention_table(const std::filesystem::path& file, std::string& error) {
  std::vector<AttentionMeasurement> out;
  const auto problems = read_csv_rows(file, "gpu,", [&](const std::vector<std::string_view>& fields) -> std::optional<std::string> {
    if (fields.size() != 6) return std::to_string(fields.size()) + " fields, expected 6 (gpu,kernel,pass,seq_length,head_dim,tflops_per_s)";
    AttentionMeasurement m;
    m.gpu = fields[0];
    m.kernel = fields[1];
    if (fields[2] != "forward" && fields[2] != "backward") return "field pass is '" + std::string(fields[2]) + "', expected forward or backward";
    m.backward = fields[2] == "backward";
    double tflops = 0;
    if (!parse_csv_number(fields[3], m.seq_length)) return "field seq_length is not a whole number: '" + std::string(fields[3]) + "'";
    if (!parse_csv_number(fields[4], m.head_dim)) return "field head_dim is not a whole number: '" + std::string(fields[4]) + "'";
    if (!parse_csv_number(fields[5], tflops)) return "field tflops_per_s is not a number: '" + std::string(fields[5]) + "'";
    if (m.gpu.empty()) return std::string("an empty gpu");
    if (m.kernel != "flash2" && m.kernel != "flash3" && m.kernel != "cudnn") return "field kernel is '" + m.kernel + "', expected flash2, flash3 or cudnn";
    if (m.seq_length < 0 || m.head_dim <= 0 || !(tflops > 0) || !std::isfinite(tflops)) return std::string("a size or throughput that is not positive and finite");
    m.flops_per_s = tflops * 1e12;
    out.push_back(m);
    return std::nullopt;
  });
  error = join_problems(problems);
  if (!problems.empty()) return {};
  return out;
}

std::vector<std::pair<double, double>> attention_pass_points(const std::vector<AttentionMeasurement>& table, const std::string& gpu,
                                                             const std::string& kernel, std::int64_t head_dim, bool backward, std::string& error) {
  error.clear();
  std::map<std::int64_t, double> by_length;
  for (const auto& m : table) {
    if (m.gpu != gpu || m.kernel != kernel || m.head_dim != head_dim || m.backward != backward) continue;
    if (!by_length.emplace(m.seq_length, m.flops_per_s).second) {
      error = gpu + " " + kernel + (backward ? " backward" : " forward") + " at " + std::to_string(m.seq_length) + " tokens is given twice";
      return {};
    }
  }
  std::vector<std::pair<double, double>> out;
  for (const auto& [length, flops_per_s] : by_length) out.emplace_back(static_cast<double>(length), flops_per_s);
  return out;
}

AttentionPace fit_attention_pace(const std::vector<AttentionMeasurement>& table, const std::string& gpu, const std::string& kernel,
                                 std::int64_t head_dim, bool backward, double best_gemm_flops_per_s) {
  std::string error;
  std::vector<std::pair<double, double>> points;
  for (const auto& [length, flops_per_s] : attention_pass_points(table, gpu, kernel, head_dim, backward, error)) {
    // A stated maximum without its length: that pace at every length.
    if (length <= 0) return {flops_per_s / best_gemm_flops_per_s, 0};
    points.emplace_back(length, flops_per_s / best_gemm_flops_per_s);
  }
  const GemmCurve curve = fit_gemm_curve(points);
  return {curve.max_efficiency, curve.half_macs};
}

}  // namespace meshwork::models
