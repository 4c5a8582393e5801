#include "kernels/one_bit.hpp"

#include <cmath>
#include <string>

#include "kernels/tensor.hpp"

namespace meshwork::kernels {
namespace {

constexpr std::size_t kBitsPerWord = 64;

template <class T>
T value_of(const OneBitCompressed<T>& c, std::size_t i) {
  const bool negative = (c.sign_bits[i / kBitsPerWord] >> (i % kBitsPerWord)) & 1U;
  return negative ? -c.scale : c.scale;
}

}  // namespace

template <class T>
OneBitCompressed<T> one_bit_compress(std::span<const T> grad, std::span<T> error) {
  require(error.size() == grad.size(), "one_bit_compress",
          "error has " + std::to_string(error.size()) + " values for " +
              std::to_string(grad.size()) + " gradients");
  OneBitCompressed<T> c;
  c.count = grad.size();
  c.sign_bits.assign((grad.size() + kBitsPerWord - 1) / kBitsPerWord, 0);
  // Error feedback (Seide et al. 2014; Tang et al. 2021 Algorithm 1): compress what was
  // left over last time together with this gradient. error temporarily holds compensated.
  double abs_sum = 0;
  for (std::size_t i = 0; i < grad.size(); ++i) {
    error[i] = grad[i] + error[i];
    abs_sum += std::abs(static_cast<double>(error[i]));
    if (std::signbit(error[i]))
      c.sign_bits[i / kBitsPerWord] |= std::uint64_t{1} << (i % kBitsPerWord);
  }
  // The L1 scale ||x||_1 / d of Karimireddy et al. 2019 (EF-SignSGD, Algorithm 1) keeps the
  // compressed vector's mass equal to the original's; a NaN anywhere makes the scale NaN, so
  // every decompressed value is NaN rather than a plausible sign. Summed in double, so that for
  // float data a GPU reduction in any order agrees with it to float precision.
  c.scale = grad.empty() ? T(0) : static_cast<T>(abs_sum / static_cast<double>(grad.size()));
  for (std::size_t i = 0; i < grad.size(); ++i) error[i] -= value_of(c, i);
  return c;
}

template <class T>
void one_bit_decompress(const OneBitCompressed<T>& compressed, std::span<T> out) {
  require(out.size() == compressed.count, "one_bit_decompress",
          "out holds " + std::to_string(out.size()) + " values for " +
              std::to_string(compressed.count) + " encoded");
  require(compressed.sign_bits.size() * kBitsPerWord >= compressed.count, "one_bit_decompress",
          std::to_string(compressed.sign_bits.size()) + " sign words cannot hold " +
              std::to_string(compressed.count) + " values");
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = value_of(compressed, i);
}

template OneBitCompressed<float> one_bit_compress<float>(std::span<const float>, std::span<float>);
template OneBitCompressed<double> one_bit_compress<double>(std::span<const double>,
                                                           std::span<double>);
template void one_bit_decompress<float>(const OneBitCompressed<float>&, std::span<float>);
template void one_bit_decompress<double>(const OneBitCompressed<double>&, std::span<double>);

}  // namespace meshwork::kernels
