#include "exec/cuda/gemm.hpp"

#include <array>
#include <string>
#include <vector>

#include "exec/cuda/cublas_check.hpp"

namespace meshwork::exec::cuda {

namespace {

using kernels::cuda::fail;

// Largest power of two up to 256 dividing `bytes` (256: cuBLASLt's default assumption,
// CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES in cublasLt.h).
std::uint32_t alignment_bytes(std::uint64_t bytes) {
  if (bytes == 0) return 256;
  const std::uint64_t low = bytes & (~bytes + 1);
  return static_cast<std::uint32_t>(low < 256 ? low : 256);
}

// The alignment of every matrix of a batch: the base address and each stride step.
std::uint32_t batch_alignment_bytes(const void* p, std::int64_t stride_elements, std::size_t element_bytes, std::int64_t batch) {
  const std::uint32_t base = alignment_bytes(reinterpret_cast<std::uintptr_t>(p));
  if (batch <= 1) return base;
  const std::uint32_t step = alignment_bytes(static_cast<std::uint64_t>(stride_elements) * element_bytes);
  return base < step ? base : step;
}

std::string describe(Gemm::Types t, const BatchedGemmShape& s) {
  const char* types = t == Gemm::Types::bf16_to_bf16          ? "bf16"
                      : t == Gemm::Types::bf16_to_f32 ? "bf16 -> fp32"
                      : t == Gemm::Types::f32         ? "fp32"
                                                      : "fp8 e4m3 -> bf16";
  std::string d = std::string(types) + " GEMM m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + (s.trans_a ? " A^T" : " A") +
                  (s.trans_b ? " B^T" : " B");
  if (s.batch != 1) d += " batch=" + std::to_string(s.batch);
  return d;
}

// Checks the shape on the host and fills in packed leading dimensions. Stored matrices are
// row-major: A is (trans_a ? k x m : m x k), B is (trans_b ? n x k : k x n), C is m x n.
BatchedGemmShape resolve(Gemm::Types types, BatchedGemmShape s) {
  const std::string what = describe(types, s);
  auto bad = [&](const std::string& why) { fail(__FILE__, __LINE__, "Gemm", what + ": " + why); };
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) bad("m, n and k must be positive");
  if (s.batch <= 0) bad("the batch must be positive");
  if (s.batch > INT32_MAX) bad("the batch is over cuBLASLt's int32 count");
  const std::int64_t cols_a = s.trans_a ? s.m : s.k, cols_b = s.trans_b ? s.k : s.n;
  if (s.lda == 0) s.lda = cols_a;
  if (s.ldb == 0) s.ldb = cols_b;
  if (s.ldc == 0) s.ldc = s.n;
  if (s.lda < cols_a) bad("lda " + std::to_string(s.lda) + " is less than A's " + std::to_string(cols_a) + " columns");
  if (s.ldb < cols_b) bad("ldb " + std::to_string(s.ldb) + " is less than B's " + std::to_string(cols_b) + " columns");
  if (s.ldc < s.n) bad("ldc " + std::to_string(s.ldc) + " is less than C's " + std::to_string(s.n) + " columns");
  if (s.stride_a < 0 || s.stride_b < 0 || s.stride_c < 0) bad("negative batch stride");
  if (s.batch > 1 && s.stride_c == 0) bad("every product of the batch would write the same C (stride_c 0)");
  return s;
}

struct TypeSet {
  cudaDataType_t a, c;
  std::size_t a_bytes, c_bytes;
};

TypeSet types_of(Gemm::Types t) {
  switch (t) {
    case Gemm::Types::bf16_to_bf16: return {CUDA_R_16BF, CUDA_R_16BF, 2, 2};
    case Gemm::Types::bf16_to_f32: return {CUDA_R_16BF, CUDA_R_32F, 2, 4};
    case Gemm::Types::f32: return {CUDA_R_32F, CUDA_R_32F, 4, 4};
    case Gemm::Types::fp8_e4m3_to_bf16: return {CUDA_R_8F_E4M3, CUDA_R_16BF, 1, 2};
  }
  fail(__FILE__, __LINE__, "Gemm", "unknown types");
}

}  // namespace

// cuBLASLt's descriptors for one problem and the algorithm its heuristic chose.
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace_bytes = 0;
  // The heuristic's other candidates, best first, tried when cublasLtMatmul refuses `algo`
  // with CUBLAS_STATUS_NOT_SUPPORTED (the first becomes `algo` once it runs).
  std::vector<cublasLtMatmulHeuristicResult_t> fallbacks;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {  // not checked: destructors do not throw
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm(std::size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  MESHWORK_CUDA_CHECK(cudaGetDevice(&device_));
  int major = 0, minor = 0;
  MESHWORK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
  MESHWORK_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_));
  compute_capability_ = 10 * major + minor;
  MESHWORK_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);  // not checked: destructors do not throw
}

const float* Gemm::unit_scale() {
  if (unit_scale_.size() == 0) {
    const float one = 1.0F;
    unit_scale_ = kernels::cuda::DeviceBuffer<float>(std::span<const float>(&one, 1));
  }
  return unit_scale_.data();
}

void* Gemm::workspace(cudaStream_t stream) {
  if (workspace_bytes_ == 0) return nullptr;
  auto it = workspaces_.find(stream);
  if (it == workspaces_.end()) it = workspaces_.emplace(stream, kernels::cuda::DeviceBuffer<std::byte>(workspace_bytes_)).first;
  return it->second.data();
}

Gemm::Plan& Gemm::plan_for(const Key& key) {
  if (const auto it = plans_.find(key); it != plans_.end()) return *it->second;
  const BatchedGemmShape& s = key.shape;
  const TypeSet t = types_of(key.types);
  auto plan = std::make_unique<Plan>();
  // fp32 accumulation and fp32 alpha/beta for every input type (cuBLAS docs, cublasLtMatmul(),
  // table of supported type combinations: 16BF inputs with 16BF or 32F C/D, and 8F_E4M3 inputs
  // with 16BF C/D, under CUBLAS_COMPUTE_32F and a CUDA_R_32F scale). For fp32 data this is IEEE fp32, not TF32 (that is _FAST_TF32).
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major C^T = op(B)^T op(A)^T (see gemm.hpp): cuBLASLt's A is our B with our B's
  // transpose flag, its B is our A with ours.
  const cublasOperation_t op_a = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  // Stored matrices, column-major view: our B (stored trans_b ? n x k : k x n, row-major) is
  // column-major (trans_b ? k x n : n x k) with ld = ldb; our A likewise; C is n x m.
  const auto rows_b = static_cast<std::uint64_t>(s.trans_b ? s.k : s.n), cols_b = static_cast<std::uint64_t>(s.trans_b ? s.n : s.k);
  const auto rows_a = static_cast<std::uint64_t>(s.trans_a ? s.m : s.k), cols_a = static_cast<std::uint64_t>(s.trans_a ? s.k : s.m);
  MESHWORK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, t.a, rows_b, cols_b, s.ldb));
  MESHWORK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, t.a, rows_a, cols_a, s.lda));
  MESHWORK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, t.c, static_cast<std::uint64_t>(s.n), static_cast<std::uint64_t>(s.m), s.ldc));
  if (s.batch > 1) {
    const auto batch = static_cast<std::int32_t>(s.batch);
    const std::int64_t strides[3] = {s.stride_b, s.stride_a, s.stride_c};
    cublasLtMatrixLayout_t layouts[3] = {plan->a, plan->b, plan->c};
    for (int i = 0; i < 3; ++i) {
      MESHWORK_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
      MESHWORK_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof strides[i]));
    }
  }
  if (key.types == Types::fp8_e4m3_to_bf16) {
    // The scale pointers before the heuristic, as cuBLASLt's fp8 sample sets them: chosen
    // without them, the H200 of the first GPU check (2026-12-04, cuBLAS 13.0) ran an algorithm
    // that cublasLtMatmul then refused with scales set (CUBLAS_STATUS_NOT_SUPPORTED). Each call
    // sets its own tensors' (run).
    const float* unit = unit_scale();
    MESHWORK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &unit, sizeof unit));
    MESHWORK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &unit, sizeof unit));
  }
  cublasLtMatmulPreference_t pref = nullptr;
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } guard{pref};
  const std::uint64_t max_workspace = workspace_bytes_;
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof max_workspace));
  // cuBLASLt's A is our B, so our alignments swap too.
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_b_bytes, sizeof key.align_b_bytes));
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_a_bytes, sizeof key.align_a_bytes));
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_c_bytes, sizeof key.align_c_bytes));
  MESHWORK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_c_bytes, sizeof key.align_c_bytes));
  constexpr int kCandidates = 8;
  std::array<cublasLtMatmulHeuristicResult_t, kCandidates> results{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, kCandidates, results.data(), &found);
  const cublasLtMatmulHeuristicResult_t& result = results[0];
  // NOT_SUPPORTED: no heuristic for this configuration at all; said with the problem below.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) check_cublas(status, __FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic");
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    fail(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic",
         "no cuBLASLt algorithm for " + describe(key.types, s) + " (lda " + std::to_string(s.lda) + ", ldb " + std::to_string(s.ldb) + ", ldc " + std::to_string(s.ldc) +
             "; alignment A " + std::to_string(key.align_a_bytes) + " B " + std::to_string(key.align_b_bytes) + " C " + std::to_string(key.align_c_bytes) +
             " bytes) on a device of compute capability " + std::to_string(compute_capability_ / 10) + "." + std::to_string(compute_capability_ % 10));
  }
  plan->algo = result.algo;
  plan->workspace_bytes = result.workspaceSize;
  for (int i = 1; i < found; ++i)
    if (results[static_cast<std::size_t>(i)].state == CUBLAS_STATUS_SUCCESS) plan->fallbacks.push_back(results[static_cast<std::size_t>(i)]);
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void Gemm::run(Types types, const void* a, const void* b, void* c, const BatchedGemmShape& shape, float alpha, float beta, const float* a_scale, const float* b_scale,
               cudaStream_t stream) {
  const BatchedGemmShape s = resolve(types, shape);
  if (a == nullptr || b == nullptr || c == nullptr) fail(__FILE__, __LINE__, "Gemm", describe(types, s) + ": a null matrix pointer");
  const TypeSet t = types_of(types);
  const Key key{types, s, batch_alignment_bytes(a, s.stride_a, t.a_bytes, s.batch), batch_alignment_bytes(b, s.stride_b, t.a_bytes, s.batch),
                batch_alignment_bytes(c, s.stride_c, t.c_bytes, s.batch)};
  Plan& plan = plan_for(key);
  if (types == Types::fp8_e4m3_to_bf16) {
    // cuBLASLt's A is our B: its scale is b_scale. Set on every call: the plan is shared by
    // every call of this shape, whatever its tensors. A null scale is 1 (unit_scale_).
    if (a_scale == nullptr) a_scale = unit_scale();
    if (b_scale == nullptr) b_scale = unit_scale();
    auto aligned = [](const float* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
    if (!aligned(a_scale) || !aligned(b_scale)) {
      auto it = staged_scales_.find(stream);
      if (it == staged_scales_.end()) it = staged_scales_.emplace(stream, kernels::cuda::DeviceBuffer<float>(8)).first;
      float* staged = it->second.data();  // slots 0 and 4: 16 bytes apart
      if (!aligned(a_scale)) {
        MESHWORK_CUDA_CHECK(cudaMemcpyAsync(staged, a_scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
        a_scale = staged;
      }
      if (!aligned(b_scale)) {
        MESHWORK_CUDA_CHECK(cudaMemcpyAsync(staged + 4, b_scale, sizeof(float), cudaMemcpyDeviceToDevice, stream));
        b_scale = staged + 4;
      }
    }
    MESHWORK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale, sizeof b_scale));
    MESHWORK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale, sizeof a_scale));
  }
  // alpha and beta are host values (CUBLASLT_POINTER_MODE_HOST, the default), read before the
  // call returns.
  auto matmul = [&] {
    return cublasLtMatmul(handle_, plan.desc, &alpha, b, plan.a, a, plan.b, &beta, c, plan.c, c, plan.c, &plan.algo,
                          plan.workspace_bytes > 0 ? workspace(stream) : nullptr, plan.workspace_bytes, stream);
  };
  cublasStatus_t status = matmul();
  const bool had_candidates = !plan.fallbacks.empty();
  // The heuristic's first choice is not always one cublasLtMatmul runs: the fp8 GEMM of the first
  // GPU check (H200, cuBLAS 13.0, 2026-12-04) was refused with NOT_SUPPORTED. Its next candidates,
  // in order; the one that runs is kept for the shape.
  while (status == CUBLAS_STATUS_NOT_SUPPORTED && !plan.fallbacks.empty()) {
    plan.algo = plan.fallbacks.front().algo;
    plan.workspace_bytes = plan.fallbacks.front().workspaceSize;
    plan.fallbacks.erase(plan.fallbacks.begin());
    status = matmul();
  }
  check_cublas(status, __FILE__, __LINE__,
               ("cublasLtMatmul of " + describe(types, s) + (had_candidates && status == CUBLAS_STATUS_NOT_SUPPORTED ? " (every candidate of the heuristic)" : ""))
                   .c_str());
}

void Gemm::matmul(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b,
                  float alpha, float beta, cudaStream_t stream) {
  run(Types::bf16_to_bf16, a, b, c, BatchedGemmShape{m, n, k, trans_a, trans_b}, alpha, beta, nullptr, nullptr, stream);
}

void Gemm::matmul(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b,
                  float alpha, float beta, cudaStream_t stream) {
  run(Types::bf16_to_f32, a, b, c, BatchedGemmShape{m, n, k, trans_a, trans_b}, alpha, beta, nullptr, nullptr, stream);
}

void Gemm::matmul(const float* a, const float* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a, bool trans_b, float alpha, float beta,
                  cudaStream_t stream) {
  run(Types::f32, a, b, c, BatchedGemmShape{m, n, k, trans_a, trans_b}, alpha, beta, nullptr, nullptr, stream);
}

void Gemm::matmul_batched(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, const BatchedGemmShape& shape, float alpha, float beta,
                          cudaStream_t stream) {
  run(Types::bf16_to_bf16, a, b, c, shape, alpha, beta, nullptr, nullptr, stream);
}

void Gemm::matmul_batched(const float* a, const float* b, float* c, const BatchedGemmShape& shape, float alpha, float beta, cudaStream_t stream) {
  run(Types::f32, a, b, c, shape, alpha, beta, nullptr, nullptr, stream);
}

void Gemm::matmul_fp8(const __nv_fp8_e4m3* a, const __nv_fp8_e4m3* b, __nv_bfloat16* c, std::int64_t m, std::int64_t n, std::int64_t k, const float* a_scale,
                      const float* b_scale, float alpha, float beta, cudaStream_t stream) {
  const BatchedGemmShape shape{m, n, k, false, true};
  const std::string what = describe(Types::fp8_e4m3_to_bf16, shape);
  if (!supports_fp8()) {
    fail(__FILE__, __LINE__, "Gemm::matmul_fp8",
         what + ": fp8 GEMMs need compute capability 8.9 or more (Ada, Hopper); this device has " + std::to_string(compute_capability_ / 10) + "." +
             std::to_string(compute_capability_ % 10));
  }
  // 16-byte alignment of the fp8 kernels (cuBLAS docs, cublasLtMatmul(), FP8 requirements):
  // the leading dimension of A and B is k one-byte elements, of C n two-byte ones.
  if (k % 16 != 0 || n % 8 != 0) fail(__FILE__, __LINE__, "Gemm::matmul_fp8", what + ": fp8 GEMMs need k a multiple of 16 and n a multiple of 8");
  if (alignment_bytes(reinterpret_cast<std::uintptr_t>(a)) < 16 || alignment_bytes(reinterpret_cast<std::uintptr_t>(b)) < 16 ||
      alignment_bytes(reinterpret_cast<std::uintptr_t>(c)) < 16) {
    fail(__FILE__, __LINE__, "Gemm::matmul_fp8", what + ": fp8 GEMMs need 16-byte aligned A, B and C");
  }
  run(Types::fp8_e4m3_to_bf16, a, b, c, shape, alpha, beta, a_scale, b_scale, stream);
}

}  // namespace meshwork::exec::cuda
