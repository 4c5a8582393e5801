#pragma once
// 1-bit gradient compression with error feedback (Seide et al. 2014, "1-bit SGD"; Tang et al.
// 2021, "1-bit Adam", Algorithm 1): each value is sent as its sign and the tensor as one scale,
// and what the compression lost is added to the next step's gradient, so no update is lost,
// only delayed.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace meshwork::kernels {

template <class T>
struct OneBitCompressed {
  // Bit i % 64 of word i / 64 is the sign bit of value i (1 = negative), as IEEE 754 stores it.
  std::vector<std::uint64_t> sign_bits;
  std::size_t count = 0;  // values encoded
  T scale = 0;            // the magnitude every value decompresses to: mean |grad + error|
};

// compensated = grad + error; returns sign(compensated) * scale with scale = mean|compensated|,
// and sets error = compensated - decompress(result) (the error-feedback residual). -0 counts
// as negative and +0 as positive: one bit has no zero. error must have grad's length (zeros
// on the first step). Call as one_bit_compress<float>(...) when passing std::vector.
template <class T>
OneBitCompressed<T> one_bit_compress(std::span<const T> grad, std::span<T> error);

// out[i] = +-scale by sign bit i; out must hold compressed.count values.
template <class T>
void one_bit_decompress(const OneBitCompressed<T>& compressed, std::span<T> out);

}  // namespace meshwork::kernels
