// FNV-1a checksums: the published test vector, equality for equal bits wherever they are
// stored, and a change for every single bit flip tried; the same for the chunked variant the
// GPU computes in parallel.
#include "kernels/checksum.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
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

TEST(ChunkedChecksum, IsThePlainChecksumWhenOneChunkHoldsEverything) {
  std::mt19937_64 rng(61);
  std::normal_distribution<float> normal;
  std::vector<float> data(1000);
  for (float& x : data) x = normal(rng);
  const std::uint64_t plain = checksum_fnv1a64<float>(data);
  EXPECT_EQ(checksum_fnv1a64_chunked<float>(data, 1000), plain);
  EXPECT_EQ(checksum_fnv1a64_chunked<float>(data, 1 << 20), plain);
  EXPECT_EQ(checksum_fnv1a64_chunked<float>({}, 4), checksum_fnv1a64<float>({}));  // the offset basis
  EXPECT_NE(checksum_fnv1a64_chunked<float>(data, 999), plain) << "two chunks are a different hash";
  EXPECT_THROW(checksum_fnv1a64_chunked<float>(data, 0), std::invalid_argument);
}

TEST(ChunkedChecksum, CombinesTheChunkDigestsInOrder) {
  // By the definition: the first chunk's digest, continued over each later digest's 8 bytes,
  // least-significant first, with FNV-1a steps (draft-eastlake-fnv §2: xor, then multiply).
  const std::vector<float> data = {1.0f, -2.5f, 3.0f, 0.5f, 7.0f};
  const std::span<const float> all(data);
  std::uint64_t expected = checksum_fnv1a64<float>(all.subspan(0, 2));
  for (const std::uint64_t digest : {checksum_fnv1a64<float>(all.subspan(2, 2)), checksum_fnv1a64<float>(all.subspan(4, 1))})
    for (unsigned byte = 0; byte < 8; ++byte) expected = (expected ^ ((digest >> (8 * byte)) & 0xFFU)) * 1099511628211ULL;
  EXPECT_EQ(checksum_fnv1a64_chunked<float>(data, 2), expected);
  // Chunk order matters, as element order does.
  EXPECT_NE(checksum_fnv1a64_chunked<float>(std::vector<float>{3.0f, 0.5f, 1.0f, -2.5f, 7.0f}, 2), expected);
}

TEST(ChunkedChecksum, AnySingleBitFlipChangesIt) {
  std::mt19937_64 rng(62);
  std::normal_distribution<float> normal;
  std::vector<float> data(333);
  for (float& x : data) x = normal(rng);
  const std::uint64_t clean = checksum_fnv1a64_chunked<float>(data, 16);
  // In the first chunk, at chunk boundaries and in the short last chunk (333 = 20 * 16 + 13).
  for (const std::size_t index : {std::size_t{0}, std::size_t{15}, std::size_t{16}, std::size_t{170}, std::size_t{332}}) {
    for (const unsigned bit : {0U, 1U, 7U, 8U, 22U, 23U, 30U, 31U}) {
      const float original = data[index];
      data[index] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(original) ^ (std::uint32_t{1} << bit));
      EXPECT_NE(checksum_fnv1a64_chunked<float>(data, 16), clean) << "element " << index << " bit " << bit;
      data[index] = original;
    }
  }
  EXPECT_EQ(checksum_fnv1a64_chunked<float>(data, 16), clean) << "flipping back restores it";
  // Raw 16-bit words (bf16 bit patterns) hash their 2 bytes.
  const std::vector<std::uint16_t> words = {0x3f80, 0xc020};  // bf16 1.0, -2.5
  std::uint64_t plain = 14695981039346656037ULL;
  for (const unsigned byte : {0x80U, 0x3fU, 0x20U, 0xc0U}) plain = (plain ^ byte) * 1099511628211ULL;
  EXPECT_EQ(checksum_fnv1a64_chunked<std::uint16_t>(words, 2), plain);
  EXPECT_NE(checksum_fnv1a64_chunked<std::uint16_t>(words, 1),
            checksum_fnv1a64_chunked<std::uint16_t>(std::vector<std::uint16_t>{0x3f80, 0xc021}, 1));
}

}  // namespace
}  // namespace meshwork::kernels
