#pragma once
// The dense types every CPU reference operator takes: rows are tokens, columns are features,
// row-major like the activations a GPU kernel reads. Operators are templates instantiated for
// float (what the executor runs) and double (what the finite-difference tests need).

#include <Eigen/Core>
#include <string>
#include <string_view>

namespace meshwork::kernels {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One value per row (per-token statistics) or per column (per-feature parameters such as
// gamma): always a column vector, so `Mat::colwise() op vec` broadcasts per row and
// `vec.transpose()` broadcasts per column.
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

// The element-wise view of a Mat, for the implementations' broadcasts.
template <class T>
using MatArray = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

using Index = Eigen::Index;

// Throws std::invalid_argument("<op>: <what>") unless `ok`: every shape check goes through here
// so that messages name the operator and the shapes involved.
void require(bool ok, std::string_view op, const std::string& what);

// "[rows, cols]", for messages.
std::string shape_of(Index rows, Index cols);
template <class Derived>
std::string shape_of(const Eigen::EigenBase<Derived>& m) {
  return shape_of(m.rows(), m.cols());
}

}  // namespace meshwork::kernels
