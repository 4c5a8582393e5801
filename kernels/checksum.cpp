#include "kernels/checksum.hpp"

#include <algorithm>
#include <bit>
#include <string>

#include "kernels/tensor.hpp"

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
template <>
struct BitsOf<std::uint16_t> {
  using type = std::uint16_t;
};

// One FNV-1a step per byte of `bits`, least-significant byte first.
template <class Bits>
std::uint64_t absorb(std::uint64_t hash, Bits bits) {
  for (unsigned byte = 0; byte < sizeof(Bits); ++byte) {
    // XOR then multiply (the "1a" order): the last byte still diffuses through a multiply.
    hash ^= (bits >> (8 * byte)) & 0xFFU;
    hash *= kPrime;
  }
  return hash;
}

}  // namespace

template <class T>
std::uint64_t checksum_fnv1a64(std::span<const T> data) {
  using Bits = typename BitsOf<T>::type;
  std::uint64_t hash = kOffsetBasis;
  for (const T value : data) hash = absorb(hash, std::bit_cast<Bits>(value));
  return hash;
}

template <class T>
std::uint64_t checksum_fnv1a64_chunked(std::span<const T> data, std::size_t chunk_elems) {
  require(chunk_elems > 0, "checksum_fnv1a64_chunked", "chunk_elems must be positive");
  // The first chunk's digest is the running hash; later digests are absorbed as 8 bytes each.
  std::uint64_t hash = checksum_fnv1a64(data.first(std::min(chunk_elems, data.size())));
  for (std::size_t begin = chunk_elems; begin < data.size(); begin += chunk_elems)
    hash = absorb(hash, checksum_fnv1a64(data.subspan(begin, std::min(chunk_elems, data.size() - begin))));
  return hash;
}

#define MESHWORK_INSTANTIATE(T)                                      \
  template std::uint64_t checksum_fnv1a64<T>(std::span<const T>); \
  template std::uint64_t checksum_fnv1a64_chunked<T>(std::span<const T>, std::size_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(double)
MESHWORK_INSTANTIATE(std::uint16_t)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels
