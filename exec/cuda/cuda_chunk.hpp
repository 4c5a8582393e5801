#pragma once
// The CUDA backend's chunk (exec/chunk.hpp): GptChunk's model and op vocabulary on one GPU,
// split over tensor parallelism as GptChunk splits it (column- and row-parallel projections,
// vocabulary-parallel embedding and cross-entropy, sequence parallelism between them), with
// bf16 activations and weights in the GEMMs (cuBLASLt, fp32 accumulation) and fp32 master
// parameters and gradients, as CudaGpt computes a whole model. Each op is the CPU chunk's, on
// kernels/cuda and exec/cuda's kernels; a TP collective widens its bf16 tensor to fp32 for the
// Group (exec::Group's tensors are float) and rounds the result back.
//
// Pipeline transfers cross the interface in fp32 too (flowing() widens the bf16 tensor; a
// receive() is rounded to bf16 before the next op reads it): twice the bytes Megatron sends,
// and no rounding the CPU reference would not also see at the boundary.
//
// Attention per layer and micro-batch: materialised (P kept from forward to backward, cuBLAS
// batched GEMMs) when the sequence is at least kMaterialisedMinSeq long and P fits in the
// free memory less a reserve, else kernels/cuda's direct kernels (exec/cuda/gpt_cuda.hpp
// explains both).
//
// Context parallelism exchanges K and V as GptChunk does (an all-gather before the attention,
// a reduce-scatter of their gradients after it) and runs the attention materialised, masked by
// the global positions of queries and keys (exec/cuda/cuda_chunk_cp.cpp).
//
// With training.precision fp8, each layer's linear GEMMs (QKV, the output projection, the MLP's
// and the experts') run in e4m3 for the forward and the input gradient, both operands cast with
// their own amax (Transformer Engine's current scaling; exec/cuda/fp8_kernels.hpp), the weight
// gradients, the attention, the embedding, the head and the router in bf16
// (CudaChunk::linear explains the split). Needs compute capability 8.9 or more.
//
// MoE layers as GptChunk runs them (exec/cuda/cuda_chunk_moe.cpp): the router's GEMM on the
// device, its softmax, top-k and the sort by expert on the host from the logits (tokens x
// experts floats), the rows moved by index on the device, each local expert's GEMMs one after
// the other (no grouped GEMM yet).

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "exec/chunk.hpp"
#include "exec/cuda/gemm.hpp"

namespace meshwork::exec::cuda {

// What a backend's chunks share: the compute stream every kernel, copy and collective of the
// rank is ordered on, and cuBLASLt's handle and plans.
struct DeviceContext {
  cudaStream_t stream = nullptr;
  Gemm gemm;
};

// Throws std::invalid_argument when expert parallelism does not divide the experts.
[[nodiscard]] std::unique_ptr<Chunk> make_cuda_chunk(const ChunkConfig& config, DeviceContext& context);

}  // namespace meshwork::exec::cuda
