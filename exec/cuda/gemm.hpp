#pragma once
// GEMMs on cuBLASLt, in the executor's row-major terms: C = alpha * op(A) * op(B) + beta * C
// with op(A) m x k, op(B) k x n and C m x n, every matrix row-major; trans_a means A is stored
// k x m and op(A) = A^T (likewise B, stored n x k: a weight in [out, in] form).
//
// cuBLASLt is column-major. A row-major r x c matrix with row stride ld is, byte for byte, the
// column-major c x r matrix (its transpose) with leading dimension ld. So the row-major
// product C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: cuBLASLt's
// "A" is our B and its "B" is our A, each with the same transpose flag as ours, and its output
// is n x m with leading dimension ldc. No data moves.
//
// bf16 in and out with fp32 accumulation and fp32 alpha/beta (CUBLAS_COMPUTE_32F); bf16 in and
// fp32 out (weight gradients accumulated into fp32 with beta = 1); an fp32
// variant (true fp32, no TF32) to compare with the CPU kernels; a strided-batched variant for
// attention's per-head Q K^T and P V; and fp8 (e4m3) inputs with per-tensor scales and bf16
// out, on devices of compute capability 8.9 or more. Each distinct problem (types, shape,
// transposes, strides, pointer alignment) gets its algorithm from cuBLASLt's heuristic once,
// then reuses it. Not thread-safe: one Gemm per host thread.

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "kernels/cuda/device_buffer.hpp"

namespace meshwork::exec::cuda {

// cuBLAS's recommended workspace on Hopper (cuBLAS API reference, cublasSetWorkspace(): 32 MiB
// for the Hopper architecture, 4 MiB for the others); the larger one serves every device.
inline constexpr std::size_t kGemmWorkspaceBytes = std::size_t{32} << 20;

// `batch` products; product i reads A + i*stride_a (in elements), B + i*stride_b and writes
// C + i*stride_c. lda, ldb, ldc: the row stride of each stored matrix in elements, 0 for
// packed rows (attention reads one head of a [tokens, heads*head_dim] tensor with ld =
// heads*head_dim and stride = head_dim).
struct BatchedGemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::int64_t batch = 1;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

class Gemm {
 public:
  // On the device current now; every call must run with that device current.
  explicit Gemm(std::size_t workspace_bytes = kGemmWorkspaceBytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void matmul(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b,
              float alpha, float beta, cudaStream_t stream);
  void matmul(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b,
              float alpha, float beta, cudaStream_t stream);
  void matmul(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b, float alpha, float beta,
              cudaStream_t stream);
  void matmul_batched(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, const BatchedGemmShape& shape, float alpha, float beta, cudaStream_t stream);
  void matmul_batched(const float* a, const float* b, float* c, const BatchedGemmShape& shape, float alpha, float beta, cudaStream_t stream);

  // C = alpha * (a_scale * A) * (b_scale * B)^T + beta * C: A is m x k, B is n x k (a weight
  // in [out, in] form), both e4m3; real A = *a_scale * A_e4m3 (a_scale, b_scale: device
  // pointers to one float each, or null for 1). On compute capability 8.9 and 9.0 this is the
  // only layout cuBLASLt's fp8 kernels take ("TN", cuBLAS docs, cublasLtMatmul(), FP8
  // requirements), and they need 16-byte aligned pointers and leading dimensions: k a multiple
  // of 16, n of 8. Throws on devices below 8.9.
  void matmul_fp8(const __nv_fp8_e4m3* a, const __nv_fp8_e4m3* b, __nv_bfloat16* c, std::int64_t m, std::int64_t n, std::int64_t k, const float* a_scale,
                  const float* b_scale, float alpha, float beta, cudaStream_t stream);

  [[nodiscard]] bool supports_fp8() const { return compute_capability_ >= 89; }
  [[nodiscard]] std::size_t cached_plans() const { return plans_.size(); }

  enum class Types : std::uint8_t { bf16_to_bf16, bf16_to_f32, f32, fp8_e4m3_to_bf16 };

 private:
  // One problem as cuBLASLt's heuristic sees it: the alignments of the pointers (the largest
  // power of two up to 256 bytes dividing each matrix's address) are part of it, since an
  // algorithm chosen for aligned data may not run on less aligned data.
  struct Key {
    Types types;
    BatchedGemmShape shape;  // with ld and strides resolved
    std::uint32_t align_a_bytes, align_b_bytes, align_c_bytes;
    auto operator<=>(const Key& o) const {
      const auto t = [](const Key& x) {
        const auto& s = x.shape;
        return std::tuple(x.types, s.m, s.n, s.k, s.trans_a, s.trans_b, s.batch, s.lda, s.ldb, s.ldc, s.stride_a, s.stride_b, s.stride_c, x.align_a_bytes,
                          x.align_b_bytes, x.align_c_bytes);
      };
      return t(*this) <=> t(o);
    }
  };
  struct Plan;

  void run(Types types, const void* a, const void* b, void* c, const BatchedGemmShape& shape, float alpha, float beta, const float* a_scale, const float* b_scale,
           cudaStream_t stream);
  Plan& plan_for(const Key& key);
  // The workspace of `stream`: concurrent GEMMs on different streams must not share one
  // (cuBLAS API reference, cublasSetWorkspace()).
  void* workspace(cudaStream_t stream);
  const float* unit_scale();

  cublasLtHandle_t handle_ = nullptr;
  std::size_t workspace_bytes_;
  int device_ = 0;
  int compute_capability_ = 0;  // 10 * major + minor
  std::map<cudaStream_t, kernels::cuda::DeviceBuffer<std::byte>> workspaces_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  // 1.0f on the device: the fp8 scale for a null a_scale or b_scale, so that every fp8 call,
  // and the heuristic query before it, has both scale pointers set (made on first use).
  kernels::cuda::DeviceBuffer<float> unit_scale_;
  // Per stream, two 16-byte aligned floats: copies of fp8 scales whose pointers are not
  // 16-byte aligned (the H200 of the first GPU check refused every algorithm for a scale
  // pointer 4 bytes past an aligned one; cuBLASLt's heuristic had seen aligned ones).
  std::map<cudaStream_t, kernels::cuda::DeviceBuffer<float>> staged_scales_;
};

}  // namespace meshwork::exec::cuda
