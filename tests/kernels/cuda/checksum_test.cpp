// The CUDA chunked FNV-1a checksum equals kernels/checksum.hpp's checksum_fnv1a64_chunked
// exactly, for float and bf16 data (bf16 compared as its raw 16-bit words).
#include "kernels/cuda/checksum.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/checksum.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

// The CPU checksum of what a T buffer holds: floats as floats, bf16 as their bit patterns.
template <class T>
std::uint64_t cpu_checksum(const std::vector<T>& data, std::size_t chunk_elems) {
  if constexpr (std::is_same_v<T, float>) {
    return kernels::checksum_fnv1a64_chunked<float>(data, chunk_elems);
  } else {
    std::vector<std::uint16_t> bits(data.size());
    std::memcpy(bits.data(), data.data(), data.size() * sizeof(std::uint16_t));
    return kernels::checksum_fnv1a64_chunked<std::uint16_t>(bits, chunk_elems);
  }
}

template <class T>
std::uint64_t gpu_checksum(const DeviceBuffer<T>& data, std::size_t chunk_elems) {
  DeviceBuffer<std::uint64_t> result(1);
  cuda::checksum_fnv1a64_chunked<T>(data.data(), static_cast<std::int64_t>(data.size()),
                                    static_cast<std::int64_t>(chunk_elems), result.data(), nullptr);
  return result.download()[0];
}

template <class T>
class ChunkedChecksum : public ::testing::Test {};
TYPED_TEST_SUITE(ChunkedChecksum, ElementTypes, ElementTypeNames);

TYPED_TEST(ChunkedChecksum, EqualsTheCpuDefinitionExactly) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(1101);
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{100003}}) {
    const auto values = random_values(count, rng, -100.0, 100.0);
    DeviceBuffer<T> data_d = upload<T>(values);
    const std::vector<T> data = data_d.download();  // the exact bits on the device
    // One chunk (the plain FNV-1a), uneven last chunks, one value per chunk.
    for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20}) {
      SCOPED_TRACE("count " + std::to_string(count) + " chunk " + std::to_string(chunk));
      EXPECT_EQ(gpu_checksum(data_d, chunk), cpu_checksum(data, chunk));
    }
  }
}

TYPED_TEST(ChunkedChecksum, DetectsASingleBitFlipOnTheDevice) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(1102);
  DeviceBuffer<T> data_d = upload<T>(random_values(5000, rng));
  std::vector<T> data = data_d.download();
  const std::uint64_t clean = gpu_checksum(data_d, 512);
  for (const std::size_t index : {std::size_t{0}, std::size_t{511}, std::size_t{512}, std::size_t{4999}}) {
    for (const unsigned bit : {0U, 7U, 8U, 15U}) {  // both bytes of a bf16, low bytes of a float
      std::vector<T> flipped = data;
      auto* bytes = reinterpret_cast<unsigned char*>(&flipped[index]);
      bytes[bit / 8] ^= static_cast<unsigned char>(1U << (bit % 8));
      DeviceBuffer<T> flipped_d{std::span<const T>(flipped)};
      EXPECT_NE(gpu_checksum(flipped_d, 512), clean) << "element " << index << " bit " << bit;
    }
  }
}

TEST(ChunkedChecksumArguments, ZeroChunkThrows) {
  EXPECT_THROW(cuda::checksum_fnv1a64_chunked<float>(nullptr, 4, 0, nullptr, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels::cuda
