#pragma once
// The chunked FNV-1a checksum of kernels/checksum.hpp (checksum_fnv1a64_chunked) computed on
// the GPU: one thread hashes each chunk, then one thread combines the digests in order. Same
// definition, so a GPU checksum equals the CPU's for the same bits and chunk size.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// data: [count] (float: 4 bytes per value, bf16: its 2 bytes, least-significant first);
// result: one uint64 on the device, written in stream order. chunk_elems > 0; chunks of
// 64 K values keep the sequential combine short (count / chunk_elems digests).
template <class T>
void checksum_fnv1a64_chunked(const T* data, std::int64_t count, std::int64_t chunk_elems, std::uint64_t* result,
                              cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
