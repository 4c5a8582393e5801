#include "kernels/cuda/checksum.hpp"

#include <algorithm>
#include <string>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/stream_buffer.hpp"

namespace meshwork::kernels::cuda {
namespace {

// draft-eastlake-fnv §2.1: the 64-bit offset basis and FNV prime (as kernels/checksum.cpp).
constexpr std::uint64_t kOffsetBasis = 14695981039346656037ULL;
constexpr std::uint64_t kPrime = 1099511628211ULL;
constexpr int kThreads = 128;

__device__ __forceinline__ std::uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ __forceinline__ std::uint16_t bits_of(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }

// One FNV-1a step per byte, least-significant byte first, XOR then multiply.
template <class Bits>
__device__ __forceinline__ std::uint64_t absorb(std::uint64_t hash, Bits bits) {
  for (unsigned byte = 0; byte < sizeof(Bits); ++byte) {
    hash ^= (static_cast<std::uint64_t>(bits) >> (8 * byte)) & 0xFFU;
    hash *= kPrime;
  }
  return hash;
}

// Thread c: the FNV-1a digest of values [c * chunk_elems, min((c + 1) * chunk_elems, count)).
template <class T>
__global__ void digest_kernel(const T* data, std::int64_t count, std::int64_t chunk_elems, std::int64_t chunks,
                              std::uint64_t* digests) {
  const std::int64_t chunk = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (chunk >= chunks) return;
  const std::int64_t begin = chunk * chunk_elems;
  const std::int64_t end = count - begin < chunk_elems ? count : begin + chunk_elems;
  std::uint64_t hash = kOffsetBasis;
  for (std::int64_t i = begin; i < end; ++i) hash = absorb(hash, bits_of(data[i]));
  digests[chunk] = hash;
}

// The first digest is the running hash; each later one is absorbed as 8 bytes, in order.
__global__ void combine_kernel(const std::uint64_t* digests, std::int64_t chunks, std::uint64_t* result) {
  std::uint64_t hash = digests[0];
  for (std::int64_t c = 1; c < chunks; ++c) hash = absorb(hash, digests[c]);
  *result = hash;
}

// An empty tensor's checksum: the offset basis, as the CPU's.
__global__ void empty_kernel(std::uint64_t* result) { *result = kOffsetBasis; }

}  // namespace

template <class T>
void checksum_fnv1a64_chunked(const T* data, std::int64_t count, std::int64_t chunk_elems, std::uint64_t* result,
                              cudaStream_t stream) {
  constexpr std::string_view op = "checksum_fnv1a64_chunked";
  require(count >= 0, op, "negative count " + std::to_string(count));
  require(chunk_elems > 0, op, "chunk_elems must be positive, got " + std::to_string(chunk_elems));
  require_pointer(result, op, "result");
  if (count == 0) {
    empty_kernel<<<1, 1, 0, stream>>>(result);
    MESHWORK_CUDA_CHECK(cudaGetLastError());
    return;
  }
  require_pointer(data, op, "data");
  const std::int64_t chunks = (count - 1) / chunk_elems + 1;
  const std::int64_t blocks = (chunks + kThreads - 1) / kThreads;
  require_grid_fits(blocks, op, std::to_string(chunks) + " chunks");
  StreamBuffer<std::uint64_t> digests(static_cast<std::size_t>(chunks), stream);
  digest_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(data, count, chunk_elems, chunks,
                                                                         digests.data());
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  combine_kernel<<<1, 1, 0, stream>>>(digests.data(), chunks, result);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template void checksum_fnv1a64_chunked<float>(const float*, std::int64_t, std::int64_t, std::uint64_t*, cudaStream_t);
template void checksum_fnv1a64_chunked<__nv_bfloat16>(const __nv_bfloat16*, std::int64_t, std::int64_t,
                                                      std::uint64_t*, cudaStream_t);

}  // namespace meshwork::kernels::cuda
