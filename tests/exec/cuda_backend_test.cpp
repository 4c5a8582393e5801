// The CUDA backend's infrastructure on one GPU: cuBLASLt GEMMs against a CPU reference in
// every transpose, leading-dimension and batch form, fp8, the event timer, and NCCL groups
// of one plus the watchdog on a communicator whose second member never joins. Skips without a
// device (a CTest label keeps it out of CPU-only runs).
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <array>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "exec/cuda/fp8_kernels.hpp"
#include "exec/cuda/gemm.hpp"
#include "exec/cuda/nccl_group.hpp"
#include "exec/cuda/nvtx.hpp"
#include "exec/cuda/streams.hpp"
#include "exec/cuda/unique_id.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_buffer.hpp"

namespace meshwork::exec::cuda {
namespace {

using kernels::cuda::DeviceBuffer;

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device"

// Small integers: exact in bf16, e4m3 and every fp32 sum below.
std::vector<float> ints(std::size_t n, int seed) {
  std::mt19937 g(static_cast<unsigned>(seed));
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

// Row-major reference: C = alpha op(A) op(B) + beta C with leading dimensions.
void reference(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c, const BatchedGemmShape& s, std::int64_t batch_index, float alpha,
               float beta) {
  const std::int64_t lda = s.lda ? s.lda : (s.trans_a ? s.m : s.k), ldb = s.ldb ? s.ldb : (s.trans_b ? s.k : s.n), ldc = s.ldc ? s.ldc : s.n;
  const float* A = a.data() + batch_index * s.stride_a;
  const float* B = b.data() + batch_index * s.stride_b;
  float* C = c.data() + batch_index * s.stride_c;
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      double acc = 0;
      for (std::int64_t l = 0; l < s.k; ++l) {
        const float x = s.trans_a ? A[l * lda + i] : A[i * lda + l];
        const float y = s.trans_b ? B[j * ldb + l] : B[l * ldb + j];
        acc += static_cast<double>(x) * y;
      }
      C[i * ldc + j] = static_cast<float>(alpha * acc + beta * C[i * ldc + j]);
    }
  }
}

TEST(CudaGemm, Fp32EveryTransposeAndLeadingDimension) {
  REQUIRE_DEVICE();
  Gemm gemm;
  Stream stream;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      BatchedGemmShape s{.m = 37, .n = 53, .k = 29, .trans_a = ta, .trans_b = tb};
      s.lda = (ta ? s.m : s.k) + 3;
      s.ldb = (tb ? s.k : s.n) + 5;
      s.ldc = s.n + 7;
      auto a = ints(static_cast<std::size_t>((ta ? s.k : s.m) * s.lda), 1), b = ints(static_cast<std::size_t>((tb ? s.n : s.k) * s.ldb), 2);
      auto c = ints(static_cast<std::size_t>(s.m * s.ldc), 3);
      DeviceBuffer<float> da{std::span<const float>(a)}, db{std::span<const float>(b)}, dc{std::span<const float>(c)};
      gemm.matmul_batched(da.data(), db.data(), dc.data(), s, 2.0F, 1.0F, stream.get());
      stream.synchronize();
      reference(a, b, c, s, 0, 2.0F, 1.0F);
      EXPECT_EQ(dc.download(), c) << "trans_a " << ta << " trans_b " << tb;
    }
  }
}

TEST(CudaGemm, Bf16MatchesTheReferenceAndCachesOnePlanPerShape) {
  REQUIRE_DEVICE();
  Gemm gemm;
  Stream stream;
  const std::int64_t m = 64, n = 128, k = 96;
  auto a = ints(static_cast<std::size_t>(m * k), 4), b = ints(static_cast<std::size_t>(n * k), 5);
  std::vector<__nv_bfloat16> ha(a.size()), hb(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ha[i] = __float2bfloat16(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) hb[i] = __float2bfloat16(b[i]);
  DeviceBuffer<__nv_bfloat16> da{std::span<const __nv_bfloat16>(ha)}, db{std::span<const __nv_bfloat16>(hb)}, dc(static_cast<std::size_t>(m * n));
  for (int repeat = 0; repeat < 3; ++repeat) gemm.matmul(da.data(), db.data(), dc.data(), m, n, k, false, true, 1.0F, 0.0F, stream.get());
  stream.synchronize();
  EXPECT_EQ(gemm.cached_plans(), 1U);
  std::vector<float> c(static_cast<std::size_t>(m * n));
  reference(a, b, c, BatchedGemmShape{.m = m, .n = n, .k = k, .trans_a = false, .trans_b = true}, 0, 1.0F, 0.0F);
  const auto got = dc.download();
  // fp32 accumulation of integers is exact; the one rounding is to bf16 at the end.
  for (std::size_t i = 0; i < c.size(); ++i) ASSERT_EQ(__bfloat162float(got[i]), __bfloat162float(__float2bfloat16(c[i]))) << i;
}

TEST(CudaGemm, Bf16InputsAccumulateIntoFp32) {
  REQUIRE_DEVICE();
  // A weight gradient: dW [k_in, n] += X^T dY over m tokens, twice, into fp32.
  Gemm gemm;
  Stream stream;
  const std::int64_t tokens = 48, in = 32, out = 24;
  auto x = ints(static_cast<std::size_t>(tokens * in), 10), dy = ints(static_cast<std::size_t>(tokens * out), 11);
  std::vector<__nv_bfloat16> hx(x.size()), hdy(dy.size());
  for (std::size_t i = 0; i < x.size(); ++i) hx[i] = __float2bfloat16(x[i]);
  for (std::size_t i = 0; i < dy.size(); ++i) hdy[i] = __float2bfloat16(dy[i]);
  DeviceBuffer<__nv_bfloat16> dx{std::span<const __nv_bfloat16>(hx)}, ddy{std::span<const __nv_bfloat16>(hdy)};
  DeviceBuffer<float> dw(static_cast<std::size_t>(in * out));
  dw.zero();
  MESHWORK_CUDA_CHECK(cudaDeviceSynchronize());  // zero() ran on the legacy stream
  for (int i = 0; i < 2; ++i) gemm.matmul(dx.data(), ddy.data(), dw.data(), in, out, tokens, true, false, 1.0F, 1.0F, stream.get());
  stream.synchronize();
  std::vector<float> want(static_cast<std::size_t>(in * out), 0.0F);
  const BatchedGemmShape s{.m = in, .n = out, .k = tokens, .trans_a = true, .trans_b = false};
  reference(x, dy, want, s, 0, 1.0F, 1.0F);
  reference(x, dy, want, s, 0, 1.0F, 1.0F);
  EXPECT_EQ(dw.download(), want);
}

TEST(CudaGemm, StridedBatchReadsOneHeadOfAnInterleavedTensor) {
  REQUIRE_DEVICE();
  // Scores = Q K^T per head, with Q and K [tokens, heads * head_dim] and scores [heads, s, s].
  const std::int64_t tokens = 16, heads = 4, head_dim = 8;
  auto q = ints(static_cast<std::size_t>(tokens * heads * head_dim), 6), kk = ints(static_cast<std::size_t>(tokens * heads * head_dim), 7);
  std::vector<float> scores(static_cast<std::size_t>(heads * tokens * tokens));
  BatchedGemmShape s{.m = tokens, .n = tokens, .k = head_dim, .trans_a = false, .trans_b = true, .batch = heads};
  s.lda = s.ldb = heads * head_dim;
  s.stride_a = s.stride_b = head_dim;
  s.stride_c = tokens * tokens;
  Gemm gemm;
  Stream stream;
  DeviceBuffer<float> dq{std::span<const float>(q)}, dk{std::span<const float>(kk)}, ds(scores.size());
  gemm.matmul_batched(dq.data(), dk.data(), ds.data(), s, 0.5F, 0.0F, stream.get());
  stream.synchronize();
  for (std::int64_t h = 0; h < heads; ++h) reference(q, kk, scores, s, h, 0.5F, 0.0F);
  EXPECT_EQ(ds.download(), scores);
}

TEST(CudaGemm, Fp8WithScalesOrAClearError) {
  REQUIRE_DEVICE();
  Gemm gemm;
  Stream stream;
  const std::int64_t m = 32, n = 64, k = 48;
  auto a = ints(static_cast<std::size_t>(m * k), 8), b = ints(static_cast<std::size_t>(n * k), 9);
  std::vector<__nv_fp8_e4m3> ha(a.size()), hb(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) ha[i] = __nv_fp8_e4m3(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) hb[i] = __nv_fp8_e4m3(b[i]);
  DeviceBuffer<__nv_fp8_e4m3> da{std::span<const __nv_fp8_e4m3>(ha)}, db{std::span<const __nv_fp8_e4m3>(hb)};
  DeviceBuffer<__nv_bfloat16> dc(static_cast<std::size_t>(m * n));
  const std::vector<float> scales = {0.5F, 2.0F};
  DeviceBuffer<float> dscales{std::span<const float>(scales)};
  if (!gemm.supports_fp8()) {
    EXPECT_THROW(gemm.matmul_fp8(da.data(), db.data(), dc.data(), m, n, k, dscales.data(), dscales.data() + 1, 1.0F, 0.0F, stream.get()), kernels::cuda::CudaError);
    return;
  }
  gemm.matmul_fp8(da.data(), db.data(), dc.data(), m, n, k, dscales.data(), dscales.data() + 1, 1.0F, 0.0F, stream.get());
  stream.synchronize();
  std::vector<float> c(static_cast<std::size_t>(m * n));
  reference(a, b, c, BatchedGemmShape{.m = m, .n = n, .k = k, .trans_a = false, .trans_b = true}, 0, 1.0F, 0.0F);  // scales multiply to 1
  const auto got = dc.download();
  for (std::size_t i = 0; i < c.size(); ++i) ASSERT_EQ(__bfloat162float(got[i]), __bfloat162float(__float2bfloat16(c[i]))) << i;
  // Null scales are 1 (and the scales above, the second 4 bytes past a 16-byte boundary, were
  // copied to aligned ones first).
  gemm.matmul_fp8(da.data(), db.data(), dc.data(), m, n, k, nullptr, nullptr, 1.0F, 0.0F, stream.get());
  stream.synchronize();
  const auto unit = dc.download();
  for (std::size_t i = 0; i < c.size(); ++i) ASSERT_EQ(__bfloat162float(unit[i]), __bfloat162float(__float2bfloat16(c[i]))) << i;
  // A layout the fp8 kernels do not take is refused on the host.
  EXPECT_THROW(gemm.matmul_fp8(da.data(), db.data(), dc.data(), m, n, 40, nullptr, nullptr, 1.0F, 0.0F, stream.get()), kernels::cuda::CudaError);
}

// The FP8 chunk's cast (exec/cuda/fp8_kernels.hpp): the amax of the tensor maps to 448, every
// value is rounded to e4m3 as the host's conversion rounds it, the transposed cast holds the
// transpose, and the dequantising scale is amax / 448. Shapes not multiples of the 32-wide tile.
TEST(CudaFp8, CastScalesByTheAmaxAndTransposes) {
  REQUIRE_DEVICE();
  Stream stream;
  const std::int64_t rows = 45, cols = 70;
  std::mt19937 g(11);
  std::normal_distribution<float> d(0.0F, 3.0F);
  std::vector<__nv_bfloat16> x(static_cast<std::size_t>(rows * cols));
  for (auto& v : x) v = __float2bfloat16(d(g));
  x[17] = __float2bfloat16(-40.0F);  // the amax, negative
  DeviceBuffer<__nv_bfloat16> dx{std::span<const __nv_bfloat16>(x)};
  DeviceBuffer<__nv_fp8_e4m3> plain(x.size()), transposed(x.size());
  DeviceBuffer<float> scales(2 * kFp8ScaleFloats);
  quantize_e4m3(dx.data(), rows, cols, false, plain.data(), scales.data(), stream.get());
  quantize_e4m3(dx.data(), rows, cols, true, transposed.data(), scales.data() + kFp8ScaleFloats, stream.get());
  stream.synchronize();
  const auto s = scales.download();
  EXPECT_EQ(s[0], 40.0F);
  EXPECT_EQ(s[kFp8DequantSlot], 40.0F / kE4m3Max);
  EXPECT_EQ(s[kFp8ScaleFloats + kFp8DequantSlot], 40.0F / kE4m3Max);
  const auto p = plain.download(), t = transposed.download();
  const float q = kE4m3Max / 40.0F;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float want = static_cast<float>(__nv_fp8_e4m3(__bfloat162float(x[static_cast<std::size_t>(r * cols + c)]) * q));
      ASSERT_EQ(static_cast<float>(p[static_cast<std::size_t>(r * cols + c)]), want) << r << "," << c;
      ASSERT_EQ(static_cast<float>(t[static_cast<std::size_t>(c * rows + r)]), want) << r << "," << c;
    }
  }
  EXPECT_EQ(static_cast<float>(p[17]), -kE4m3Max);
  // An all-zero tensor casts to zeros with a unit scale.
  DeviceBuffer<__nv_bfloat16> zeros(64);
  // On the test stream: a cudaMemset on the legacy stream is not ordered before it (non-blocking).
  MESHWORK_CUDA_CHECK(cudaMemsetAsync(zeros.data(), 0, zeros.size() * sizeof(__nv_bfloat16), stream.get()));
  quantize_e4m3(zeros.data(), 4, 16, false, plain.data(), scales.data(), stream.get());
  stream.synchronize();
  EXPECT_EQ(scales.download()[kFp8DequantSlot], 1.0F);
  EXPECT_EQ(static_cast<float>(plain.download()[5]), 0.0F);
  // Denormal inputs: 448 / amax would overflow to inf and 0 x inf give NaN; the factor is held
  // at FLT_MAX instead, and every value casts to a finite number.
  std::vector<__nv_bfloat16> tiny(64, __float2bfloat16(1e-39F));
  tiny[3] = __float2bfloat16(0.0F);
  DeviceBuffer<__nv_bfloat16> small(64);
  small.upload(tiny);
  quantize_e4m3(small.data(), 4, 16, false, plain.data(), scales.data(), stream.get());
  stream.synchronize();
  const float dequant = scales.download()[kFp8DequantSlot];
  EXPECT_TRUE(std::isfinite(dequant) && dequant > 0.0F) << dequant;
  const auto cast = plain.download();
  for (std::size_t i = 0; i < 64; ++i) ASSERT_TRUE(std::isfinite(static_cast<float>(cast[i]))) << i;
  EXPECT_EQ(static_cast<float>(cast[3]), 0.0F);
}

TEST(CudaGemm, BadShapesAreRefusedOnTheHost) {
  REQUIRE_DEVICE();
  Gemm gemm;
  DeviceBuffer<float> x(64);
  EXPECT_THROW(gemm.matmul(x.data(), x.data(), x.data(), 0, 4, 4, false, false, 1.0F, 0.0F, nullptr), kernels::cuda::CudaError);
  BatchedGemmShape s{.m = 4, .n = 4, .k = 4, .lda = 3};
  EXPECT_THROW(gemm.matmul_batched(x.data(), x.data(), x.data(), s, 1.0F, 0.0F, nullptr), kernels::cuda::CudaError);
}

TEST(CudaStreams, TimerSumsPerOpAndWaitOrdersStreams) {
  REQUIRE_DEVICE();
  Streams streams;
  EventTimer timer;
  Gemm gemm;
  const std::int64_t n = 512;
  DeviceBuffer<float> a(static_cast<std::size_t>(n * n)), c(static_cast<std::size_t>(n * n));
  a.zero();
  MESHWORK_CUDA_CHECK(cudaDeviceSynchronize());  // zero() ran on the legacy stream
  for (int i = 0; i < 3; ++i) {
    NvtxRange range("gemm");
    auto scope = timer.scope("gemm", streams.compute.get());
    gemm.matmul(a.data(), a.data(), c.data(), n, n, n, false, false, 1.0F, 0.0F, streams.compute.get());
  }
  Event done;
  done.record(streams.compute.get());
  wait(streams.dp.get(), done);
  timer.start("copy", streams.dp.get());
  MESHWORK_CUDA_CHECK(cudaMemcpyAsync(a.data(), c.data(), c.size_bytes(), cudaMemcpyDeviceToDevice, streams.dp.get()));
  timer.stop(streams.dp.get());
  const auto& ms = timer.collect();
  EXPECT_EQ(timer.counts().at("gemm"), 3);
  EXPECT_GT(ms.at("gemm"), 0.0);
  EXPECT_GT(ms.at("copy"), 0.0);
  streams.synchronize();
  timer.start("open", streams.pp.get());
  EXPECT_THROW(timer.collect(), kernels::cuda::CudaError);
}

TEST(CudaNccl, GroupOfOneRunsEveryCollective) {
  REQUIRE_DEVICE();
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  NcclGroupOptions options;
  options.timeout_s = 60;
  NcclGroup group("tp", id, 0, 1, options);
  Stream stream;
  const std::vector<float> v = {1, 2, 3, 4};
  DeviceBuffer<float> x{std::span<const float>(v)}, y(4);
  group.all_reduce_sum(x.data(), 4, stream.get());
  group.all_reduce_max(x.data(), 4, stream.get());
  group.all_gather(x.data(), y.data(), 4, stream.get());
  group.reduce_scatter_sum(x.data(), y.data(), 4, stream.get());
  group.all_to_all(x.data(), y.data(), 4, stream.get());
  group.broadcast(x.data(), y.data(), 4, 0, stream.get());
  group.send_recv(x.data(), 4, 0, y.data(), 4, 0, stream.get());
  group.wait();
  EXPECT_EQ(y.download(), v);
  EXPECT_EQ(group.stats().calls, 7);
}

// NcclGroup as the CUDA backend's exec::Group (issue 23): float spans on the device, on the
// bound stream; integer and double spans on the host, staged; sends buffered until the next
// receive or flush; an empty transfer skipped. At one rank here; at N on a multi-GPU machine.
TEST(CudaNccl, AsAnExecGroupOfOneItRunsEveryCollective) {
  REQUIRE_DEVICE();
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  NcclGroupOptions options;
  options.timeout_s = 60;
  NcclGroup nccl("tp", id, 0, 1, options);
  Stream stream;
  nccl.bind(stream.get());
  exec::Group& g = nccl;
  const std::vector<float> v = {1, 2, 3, 4};
  DeviceBuffer<float> x{std::span<const float>(v)}, y(4);
  const std::span<float> xs(x.data(), 4), ys(y.data(), 4);
  g.all_reduce_sum(xs);
  g.all_reduce_max(xs);
  g.all_gather(std::span<const float>(xs), ys);
  g.reduce_scatter_sum(std::span<const float>(xs), ys);
  const std::vector<int> counts = {4};
  g.all_to_all_v(std::span<const float>(xs), counts, ys, counts);
  g.broadcast(0, ys);
  EXPECT_EQ(y.download(), v);
  std::array<double, 2> d = {1.5, -2.0};
  g.all_reduce_sum(std::span<double>(d));
  EXPECT_EQ(d[0], 1.5);
  EXPECT_EQ(d[1], -2.0);
  const std::vector<std::uint64_t> h = {7};
  std::vector<std::uint64_t> gathered(1);
  g.all_gather(std::span<const std::uint64_t>(h), gathered);
  EXPECT_EQ(gathered[0], 7U);
  const std::vector<std::int64_t> counts_in = {3};
  std::vector<std::int64_t> counts_out(1);
  g.all_to_all(counts_in, counts_out);
  EXPECT_EQ(counts_out[0], 3);
  DeviceBuffer<float> z(4);
  g.send(0, 5, std::span<const float>(xs));
  g.send(0, 6, std::span<const float>());  // empty: skipped on both sides
  g.recv(0, 5, std::span<float>(z.data(), 4));
  g.recv(0, 6, std::span<float>());
  g.flush();
  EXPECT_EQ(z.download(), v);
  EXPECT_GT(g.stats().calls, 6);
  EXPECT_EQ(g.world_rank(0), 0);
}

TEST(CudaNccl, AMemberThatNeverJoinsIsCaughtByTheWatchdog) {
  REQUIRE_DEVICE();
  ncclUniqueId id{};
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    NcclGroupOptions options;
    options.timeout_s = 3;
    options.world_ranks = {4, 6};
    NcclGroup group("dp", id, 0, 2, options);
    FAIL() << "created a group whose second member never joined";
  } catch (const CollectiveError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("watchdog"), std::string::npos) << what;
    EXPECT_NE(what.find("dp group"), std::string::npos) << what;
    EXPECT_NE(what.find("within 3 s"), std::string::npos) << what;
    EXPECT_NE(what.find("world rank 4"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}

}  // namespace
}  // namespace meshwork::exec::cuda
