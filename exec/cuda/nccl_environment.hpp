#pragma once
// What NCCL ran with, for the Report: the library's version and every NCCL_* environment
// variable in effect (NCCL reads its tunables from the environment: NCCL_ALGO, NCCL_PROTO,
// NCCL_IB_HCA, NCCL_SOCKET_IFNAME...; NCCL user guide, "Environment Variables"). Plain data;
// the header needs no NCCL.

#include <string>
#include <utility>
#include <vector>

namespace meshwork::exec::cuda {

struct NcclEnvironment {
  std::string version;         // of the library loaded at run time (ncclGetVersion), "2.28.9"
  std::string header_version;  // of nccl.h at build time
  std::vector<std::pair<std::string, std::string>> variables;  // NCCL_*, sorted by name
};

[[nodiscard]] NcclEnvironment nccl_environment();

// "2.28.9" from ncclGetVersion's code: major*10000 + minor*100 + patch since 2.9, major*1000 +
// minor*100 + patch before (NCCL_VERSION in nccl.h).
[[nodiscard]] std::string nccl_version_text(int code);
// The NCCL_* entries of an environ-style array ("NAME=value", null-terminated), sorted.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> nccl_variables(const char* const* env);

}  // namespace meshwork::exec::cuda
