#include "kernels/checksum.hpp"

#include <bit>

namespace meshwork::kernels {
namespace {

// draft-eastlake-fnv §2.1: the 64-bit offset basis and FNV prime.
constexpr std::uint64_t kOffsetBasis = 14695981039346656037ULL;
constexpr std::uint64_t kPrime = 1099511628211ULL;

template <class T>
struct BitsOf;
template <>
struct BitsOf<float> {
  using type = std::uint32_t;
};
template <>
struct BitsOf<double> {
  using type = std::uint64_t;
};

}  // namespace

template <class T>
std::uint64_t checksum_fnv1a64(std::span<const T> data) {
  using Bits = typename BitsOf<T>::type;
  std::uint64_t hash = kOffsetBasis;
  for (const T value : data) {
    const Bits bits = std::bit_cast<Bits>(value);
    for (unsigned byte = 0; byte < sizeof(Bits); ++byte) {
      // XOR then multiply (the "1a" order): the last byte still diffuses through a multiply.
      hash ^= (bits >> (8 * byte)) & 0xFFU;
      hash *= kPrime;
    }
  }
  return hash;
}

template std::uint64_t checksum_fnv1a64<float>(std::span<const float>);
template std::uint64_t checksum_fnv1a64<double>(std::span<const double>);

}  // namespace meshwork::kernels
