#pragma once
// Checksums for silent-data-corruption detection: data-parallel replicas that should hold
// bit-identical gradients or parameters compare one 64-bit number instead of the tensors.

#include <cstddef>
#include <cstdint>
#include <span>

namespace meshwork::kernels {

// 64-bit FNV-1a (Fowler, Noll & Vo; IETF draft-eastlake-fnv, §2) over the exact bit pattern
// of each value, bytes taken least-significant first so the result does not depend on the
// host's byte order. Exact bits, not values: -0 and +0, and NaNs with different payloads,
// give different checksums. Any single changed byte (so any single bit flip) changes the
// result: each FNV-1a step is a bijection of the running hash. Not cryptographic.
// T is float, double or std::uint16_t (raw 16-bit words: the bit patterns of bf16 or fp16
// tensors, which have no host arithmetic type here).
// Call as checksum_fnv1a64<float>(...) when passing std::vector.
template <class T>
std::uint64_t checksum_fnv1a64(std::span<const T> data);

// The same hash made parallel, defined identically on the CPU and the GPU
// (kernels/cuda/checksum.hpp): split data into chunks of chunk_elems values (the last may be
// shorter), take each chunk's checksum_fnv1a64 digest, and continue the FNV-1a hash of the
// first chunk over the 8 bytes of every later chunk's digest, least-significant byte first.
// Data that fits in one chunk (or is empty) therefore gets exactly checksum_fnv1a64(data).
// A single bit flip in the first chunk provably changes the result (each FNV-1a step is a
// bijection of the running hash); in a later chunk it provably changes that chunk's digest,
// which the combine then misses only by an FNV collision (~2^-64). Throws
// std::invalid_argument if chunk_elems is 0.
template <class T>
std::uint64_t checksum_fnv1a64_chunked(std::span<const T> data, std::size_t chunk_elems);

}  // namespace meshwork::kernels
