#pragma once
// Host-side argument checks shared by the CUDA launchers: a bad shape or a null pointer throws
// std::invalid_argument("<op>: <what>") before anything is launched, the same message form as
// the CPU operators' require() (kernels/tensor.hpp), without pulling Eigen into nvcc.

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

namespace meshwork::kernels::cuda {

inline void require(bool ok, std::string_view op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

// "[rows, cols]", for messages.
inline std::string shape_of(std::int64_t rows, std::int64_t cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

// Every launcher takes device pointers; a null one where data is expected is a caller bug.
inline void require_pointer(const void* p, std::string_view op, const char* name) {
  require(p != nullptr, op, std::string(name) + " is null");
}

// Counts are int64 in the API; a grid dimension x holds at most 2^31 - 1 blocks.
inline void require_grid_fits(std::int64_t blocks, std::string_view op, const std::string& what) {
  require(blocks <= std::numeric_limits<std::int32_t>::max(), op,
          what + " needs " + std::to_string(blocks) + " blocks, more than a grid holds");
}

}  // namespace meshwork::kernels::cuda
