#pragma once
// Top-k sparsification with error feedback (Aji & Heafield 2017; Lin et al. 2018) on the GPU,
// selecting exactly what kernels/topk.hpp selects: the k entries of largest |grad + error|,
// ties to the lower index, NaN ranking as +inf (so tying with inf, then by index).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// grad: [count] (T widened exactly to fp32); error: [count] fp32, updated in place to the
// compensated gradient with the selected entries zeroed. indices: [k], ascending; values: [k]
// fp32, the compensated values sent (values[j] belongs at indices[j]). Throws if k > count.
// A stable radix sort of (magnitude descending, index) pairs (CUB) makes the selection exact;
// it needs about 24 bytes of scratch per value, allocated on the stream.
template <class T>
void topk_compress(const T* grad, float* error, std::int64_t* indices, float* values, std::int64_t count,
                   std::int64_t k, cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
