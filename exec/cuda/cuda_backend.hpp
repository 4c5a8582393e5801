#pragma once
// The CUDA backend (exec/backend.hpp): one GPU per rank, device memory for the Trainer's
// buffers (the stream-ordered allocator, its pool kept between steps), CudaChunk for the model
// (exec/cuda/cuda_chunk.hpp), kernels/cuda for AdamW, the checksums and the scaling, all on one
// compute stream that the rank's NcclGroups are bound to.

#include <cuda_runtime_api.h>

#include <memory>

#include "exec/backend.hpp"

namespace meshwork::exec::cuda {

// Makes device `device` current and the backend's stream on it. Throws std::runtime_error
// when there is no such device.
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend(int device);

// The backend's compute stream, for the groups bound to it; null for another backend.
[[nodiscard]] cudaStream_t compute_stream_of(Backend& backend);

}  // namespace meshwork::exec::cuda
