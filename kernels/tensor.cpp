#include "kernels/tensor.hpp"

#include <stdexcept>

namespace meshwork::kernels {

void require(bool ok, std::string_view op, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(op) + ": " + what);
}

std::string shape_of(Index rows, Index cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

}  // namespace meshwork::kernels
