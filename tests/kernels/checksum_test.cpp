// FNV-1a checksums: the published test vector, equality for equal bits wherever they are
// stored, and a change for every single bit flip tried.
#include "kernels/checksum.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace meshwork::kernels {
namespace {

TEST(Checksum, MatchesFnv1aOnKnownBytes) {
  EXPECT_EQ(checksum_fnv1a64<float>({}), 14695981039346656037ULL);  // the offset basis
  // Bytes 00 00 80 3f | 00 00 20 c0 (1.0f, -2.5f least-significant byte first), hashed with
  // a straightforward FNV-1a whose "a" -> 0xaf63dc4c8601ec8c matches draft-eastlake-fnv.
  EXPECT_EQ(checksum_fnv1a64<float>(std::vector<float>{1.0f, -2.5f}), 713303693935358968ULL);
  EXPECT_EQ(checksum_fnv1a64<double>(std::vector<double>{1.0}), 12299727721494879672ULL);
}

TEST(Checksum, EqualBitsGiveEqualChecksumsWhereverStored) {
  std::mt19937_64 rng(60);
  std::normal_distribution<float> normal;
  std::vector<float> replica_a(1000);
  for (float& x : replica_a) x = normal(rng);
  const std::vector<float> replica_b = replica_a;  // another allocation, same bits
  EXPECT_EQ(checksum_fnv1a64<float>(replica_a), checksum_fnv1a64<float>(replica_b));
  EXPECT_EQ(checksum_fnv1a64<float>(replica_a), checksum_fnv1a64<float>(replica_a));
  // Exact bits, not values: +0 and -0 compare equal as floats but are different gradients.
  EXPECT_NE(checksum_fnv1a64<float>(std::vector<float>{0.0f}),
            checksum_fnv1a64<float>(std::vector<float>{-0.0f}));
  // Order matters: a permutation is a different tensor.
  EXPECT_NE(checksum_fnv1a64<float>(std::vector<float>{1.0f, 2.0f}),
            checksum_fnv1a64<float>(std::vector<float>{2.0f, 1.0f}));
}

template <class T, class Bits>
void expect_every_flip_detected(std::vector<T> data, const std::vector<unsigned>& bit_positions) {
  const std::uint64_t clean = checksum_fnv1a64<T>(data);
  for (const std::size_t index : {std::size_t{0}, data.size() / 2, data.size() - 1}) {
    for (const unsigned bit : bit_positions) {
      const T original = data[index];
      data[index] =
          std::bit_cast<T>(static_cast<Bits>(std::bit_cast<Bits>(original) ^ (Bits{1} << bit)));
      EXPECT_NE(checksum_fnv1a64<T>(data), clean) << "element " << index << " bit " << bit;
      data[index] = original;
    }
  }
  EXPECT_EQ(checksum_fnv1a64<T>(data), clean) << "flipping back restores it";
}

TEST(Checksum, AnySingleBitFlipChangesIt) {
  // Mantissa low and high, exponent, sign.
  expect_every_flip_detected<float, std::uint32_t>(std::vector<float>(333, 0.125f),
                                                   {0, 1, 7, 8, 22, 23, 30, 31});
  expect_every_flip_detected<double, std::uint64_t>(std::vector<double>(77, -3.5),
                                                    {0, 1, 31, 32, 51, 52, 62, 63});
}

}  // namespace
}  // namespace meshwork::kernels
