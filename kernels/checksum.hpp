#pragma once
// Checksums for silent-data-corruption detection: data-parallel replicas that should hold
// bit-identical gradients or parameters compare one 64-bit number instead of the tensors.

#include <cstdint>
#include <span>

namespace meshwork::kernels {

// 64-bit FNV-1a (Fowler, Noll & Vo; IETF draft-eastlake-fnv, §2) over the exact bit pattern
// of each value, bytes taken least-significant first so the result does not depend on the
// host's byte order. Exact bits, not values: -0 and +0, and NaNs with different payloads,
// give different checksums. Any single changed byte (so any single bit flip) changes the
// result: each FNV-1a step is a bijection of the running hash. Not cryptographic.
// Call as checksum_fnv1a64<float>(...) when passing std::vector.
template <class T>
std::uint64_t checksum_fnv1a64(std::span<const T> data);

}  // namespace meshwork::kernels
