#include "exec/cuda/nccl_environment.hpp"

#include <nccl.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <string_view>

#include "exec/cuda/nccl_check.hpp"

namespace meshwork::exec::cuda {

std::string nccl_version_text(int code) {
  // Codes of 2.9 and later are five digits or more (20900 for 2.9.0); older ones four (2804).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::vector<std::pair<std::string, std::string>> nccl_variables(const char* const* env) {
  std::vector<std::pair<std::string, std::string>> out;
  for (; env != nullptr && *env != nullptr; ++env) {
    const std::string_view entry(*env);
    if (!entry.starts_with("NCCL_")) continue;
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

NcclEnvironment nccl_environment() {
  NcclEnvironment e;
  int code = 0;
  MESHWORK_NCCL_CHECK(ncclGetVersion(&code));
  e.version = nccl_version_text(code);
  e.header_version = std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
  e.variables = nccl_variables(environ);
  return e;
}

}  // namespace meshwork::exec::cuda
