#pragma once
// CudaChunk's declaration and its device tensors, shared by its files (cuda_chunk.cpp: the
// parameters, the pipeline's tensors, the collectives and the ops outside the layers;
// cuda_chunk_layer.cpp: the layer's ops; cuda_chunk_cp.cpp: attention with context
// parallelism). Private to exec/cuda.

#include <cuda_bf16.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exec/cuda/cuda_chunk.hpp"
#include "exec/cuda/gpt_kernels.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda::chunk_detail {


using I = std::int64_t;
using models::OpPhase;

// Parameters start on 128-element boundaries, as CudaGpt's (cuBLASLt's default alignment).
constexpr I kAlign = 128;
// What the materialised attention leaves free: as CudaGpt's kAutomaticReserveBytes.
constexpr std::size_t kReserveBytes = std::size_t{2} << 30;

// Bytes the device can still give: its free memory and what the stream-ordered pool holds unused.
inline std::size_t free_device_bytes() {
  std::size_t free_bytes = 0, total_bytes = 0;
  MESHWORK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  int device = 0;
  MESHWORK_CUDA_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool = nullptr;
  MESHWORK_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t reserved = 0, used = 0;
  MESHWORK_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  MESHWORK_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return free_bytes + static_cast<std::size_t>(reserved > used ? reserved - used : 0);
}

// A device tensor [rows, cols], allocated and freed in the order of `stream` (the stream-ordered
// allocator: no device-wide synchronisation per op, as cudaMalloc would take).
template <class T>
class Dev {
 public:
  Dev() = default;
  Dev(I rows, I cols, cudaStream_t s) : rows_(rows), cols_(cols), s_(s) {
    if (rows * cols > 0) MESHWORK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), bytes(), s));
  }
  ~Dev() { reset(); }
  Dev(Dev&& o) noexcept : p_(std::exchange(o.p_, nullptr)), rows_(std::exchange(o.rows_, 0)), cols_(std::exchange(o.cols_, 0)), s_(o.s_) {}
  Dev& operator=(Dev&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      rows_ = std::exchange(o.rows_, 0);
      cols_ = std::exchange(o.cols_, 0);
      s_ = o.s_;
    }
    return *this;
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  [[nodiscard]] T* data() const { return p_; }
  [[nodiscard]] I rows() const { return rows_; }
  [[nodiscard]] I cols() const { return cols_; }
  [[nodiscard]] I size() const { return rows_ * cols_; }
  [[nodiscard]] bool empty() const { return size() == 0; }
  [[nodiscard]] std::size_t bytes() const { return static_cast<std::size_t>(size()) * sizeof(T); }

 private:
  void reset() {
    if (p_ != nullptr) cudaFreeAsync(p_, s_);  // not checked: destructors do not throw
    p_ = nullptr;
    rows_ = cols_ = 0;
  }
  T* p_ = nullptr;
  I rows_ = 0, cols_ = 0;
  cudaStream_t s_ = nullptr;
};
using DMat = Dev<bf16>;
using DVec = Dev<float>;

struct Entry {
  ParamSpec spec;
  I rows = 0, cols = 0;  // this rank's shard
  int flat = 0;          // 0: the dense parameters' buffers, 1: the experts'
  I offset = 0;
};

class CudaChunk final : public Chunk {
 public:
  CudaChunk(const ChunkConfig& c, DeviceContext& ctx);

  void begin_forward(int mb, const Batch& batch, double loss_scale) override;
  void begin_backward(int mb) override;
  void end_backward(int mb) override { caches_.erase(mb); }
  std::span<float> receive(int mb, Index rows, Index cols) override;
  [[nodiscard]] std::span<const float> flowing(int mb) override;
  void run(std::string_view op, OpPhase phase, std::int64_t layer, int mb) override;
  void tp_collective(models::Collective c, OpPhase phase, int mb) override;
  void ep_collective(std::string_view what, OpPhase phase, std::int64_t layer, int mb) override;
  void cp_collective(std::string_view what, OpPhase phase, std::int64_t layer, int mb) override;
  [[nodiscard]] double loss_sum() const override { return loss_sum_; }
  void reset_loss() override { loss_sum_ = 0; }
  [[nodiscard]] Index local_rows(Index tokens) const override { return sp_ ? tokens / t_ : tokens; }
  [[nodiscard]] std::vector<ParamSlot> slots() override;
  void release_values() override;
  void allocate_values() override;
  void values_changed() override;
  void zero_grads() override;

 private:
  // An MoE layer's dispatch, kept from forward to backward, as GptChunk::MoeCache: pairs are
  // (token, choice), index token * topk + choice; the send rows are the pairs sorted by expert.
  // The routing (softmax, top-k, the sort) is decided on the host from the router's logits.
  struct MoeCache {
    DVec logits;                              // [tokens, experts] the router's GEMM in fp32, until router_topk
    std::vector<float> probs;                 // host [tokens, experts]
    std::vector<std::int64_t> expert;         // per pair
    std::vector<float> gate;                  // per pair
    std::vector<std::size_t> order;           // per send row: its pair
    std::vector<std::int64_t> rows_per_expert, recv_rows;
    std::vector<int> send_counts, recv_counts;  // floats per EP member
    std::vector<Index> segment;
    std::vector<std::vector<std::int64_t>> tp_recv_rows;
    std::vector<std::vector<Index>> tp_segment;
    Index tp_block = 0;
    Dev<std::int64_t> send_token, pair_of_send, send_of_pair;  // per send row: its token, its pair; per pair: its send row
    DVec gate_pairs, gate_sends;            // the gates in pair order and in send order
    std::vector<float> dprobs;              // host: the probabilities' gradient until the router's backward
    DMat dlogits;                           // [tokens, experts], for the router's weight gradient
    DMat gathered, partial, send, rows, results, back, out;
    DMat combined;                          // per token: the residual plus its pairs' gated outputs (moe_unpermute), until mlp_residual
    std::vector<DMat> x, u, a, dout, du;    // per local expert
  };
  struct LayerCache {
    DMat x, x1, y1, y2;     // the layer's input, the residual after attention, the normalised inputs of the column-parallel layers
    DVec mean1, rstd1, mean2, rstd2;
    DMat q, k, v;           // token-major, this rank's heads and key/value groups
    DMat qh, kh, vh, atth;  // head-major [samples * heads, seq, head_dim], K and V per query head
    DVec lse;
    DMat probs;             // the materialised path's P
    DMat att;               // token-major attention output
    DMat u, a;
    DMat dq, dk, dv, dof, du, dmf;  // what the weight-gradient halves read
    // Context parallelism: every member's K and V (per group, member-major, as the exchange
    // gathers them; dropped after use, as ring attention keeps only its own block), and the
    // K and V gradients of every member's block before they travel back.
    DMat k_all, v_all, dk_blocks, dv_blocks;
    std::unique_ptr<MoeCache> moe;  // an MoE layer's, in place of u and a
  };
  struct Cache {
    std::vector<LayerCache> layers;
    Batch batch;
    I npos = 0;  // positions per sample
    Dev<std::int64_t> ids, targets, positions;
    double loss_scale = 1;
    DMat head_x, head_y, dlogits, logits;
    DVec nf_mean, nf_rstd;
    DMat cur, res, rcur, rres;
    DVec staging;  // the fp32 pipeline tensor (flowing() out, receive() in)
    bool received = false;  // staging holds a received tensor not yet rounded into cur
  };

  Cache& cache(int mb);
  LayerCache& layer_cache(Cache& c, I layer);
  // A received tensor becomes the flowing bf16 one.
  void settle(Cache& c);
  const Entry& entry(std::string_view name) const;
  [[nodiscard]] bool has(std::string_view name) const { return entries_.find(name) != entries_.end(); }
  bf16* W(std::string_view name) const;
  float* G(std::string_view name) const;
  DMat clone(const DMat& x) const;
  DMat matmul(const DMat& a, const bf16* w, I n, bool trans_b) const;
  // A transformer layer's linear product (QKV, the output projection, the MLP's, the experts'),
  // as matmul; in FP8 when the plan's precision is fp8: both operands cast to e4m3 with their
  // current amax (exec/cuda/fp8_kernels.hpp), the product accumulated in fp32 and stored in
  // bf16. This is Transformer Engine's split of the work in its FP8 linear layers: the forward
  // and the input gradient in FP8; the weight gradient (weight_grad) stays bf16 here, as TE's
  // recipes allow (`override_linear_precision`'s wgrad), since the e4m3 GEMM writes no fp32 to
  // accumulate into. The embedding, the head, the router and the attention's matmuls stay bf16,
  // as they do in Megatron with Transformer Engine (fp8_dpa off).
  DMat linear(const DMat& a, const bf16* w, I n, bool trans_b) const;
  // The same product into fp32 `y` [rows, n], added to it when `accumulate`.
  void linear_into(const DMat& a, const bf16* w, float* y, I n, bool trans_b, bool accumulate) const;
  void weight_grad(const DMat& in, const DMat& d, const std::string& name) const;
  void bias_grad(const DMat& d, const std::string& name) const;
  void add_bias_if(DMat& x, const std::string& name) const;
  DMat add(const DMat& a, const DMat& b) const;
  DMat norm_forward(const DMat& x, const std::string& name, DVec& mean, DVec& rstd) const;
  DMat norm_backward(const DMat& dy, const DMat& x, const std::string& name, const DVec& mean, const DVec& rstd) const;
  // All-gather (member-major) or reduce-scatter of a tensor's rows over `g`, through fp32 (the
  // Group's tensors are float).
  DMat gather_rows(Group& g, const DMat& x) const;
  DMat reduce_scatter_rows(Group& g, const DMat& x) const;
  // Attention with context parallelism (cuda_chunk_cp.cpp): this member's queries against
  // every member's keys, masked by their global positions, materialised (P kept).
  void cp_attention_forward(Cache& c, LayerCache& lc);
  void cp_attention_backward(Cache& c, LayerCache& lc, const DMat& dout);
  // Between the exchange's member-major rows and the attention's sample-major sequence of all
  // members' keys ([samples, cp * npos] rows); `back` the other way.
  DMat to_sequence(const DMat& member_major, I samples, I npos) const;
  DMat to_members(const DMat& sequence, I samples, I npos) const;
  // The MoE layer (cuda_chunk_moe.cpp): GptChunk::run_moe_op and its exchanges on the device.
  void run_moe_op(std::string_view op, OpPhase phase, I l, Cache& ca, LayerCache& lc);
  void dispatch(MoeCache& c, bool backward);
  void combine(MoeCache& c, bool backward);
  void moe_tp_gather(MoeCache& c, bool backward);
  void moe_tp_reduce(MoeCache& c, bool backward);
  // x's rows to the EP members by all_to_all_v (counts in floats), through fp32.
  DMat exchange_rows(const DMat& x, const std::vector<int>& send_counts, const std::vector<int>& recv_counts, I recv_rows) const;
  void run_end_op(std::string_view op, OpPhase phase, Cache& c);
  void run_layer_op(std::string_view op, OpPhase phase, I l, Cache& c);

  DeviceContext& ctx_;
  cudaStream_t s_;
  plan::ModelConfig m_;
  I first_layer_, layers_;
  bool embedding_, head_, rope_, ln_, swiglu_, bias_, tied_;
  TensorParallel tp_;
  int t_ = 1, r_ = 0;
  bool sp_ = false;
  bool fp8_ = false;  // the layers' linear GEMMs in FP8 (linear())
  I heads_, groups_, hd_, vocab_local_, vocab_begin_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> order_;  // the chunk's parameter order (GptChunk's)
  I flat_size_[2] = {0, 0};
  Dev<float> values_[2], grads_[2];
  Dev<bf16> copies_[2];
  Dev<double2> rope_table_;
  // The attention's path for (samples x heads) = materialised_for_: materialised (P kept) or direct.
  bool materialised_ = false;
  I materialised_for_ = -1;
  std::unique_ptr<Group> own_ep_;  // a group of one when no EP group is given
  Group* ep_ = nullptr;
  Group* cp_ = nullptr;
  int cp_size_ = 1, cp_rank_ = 0;
  Dev<std::int64_t> key_positions_;  // every member's positions, in member order (the keys' sequence)
  std::map<int, std::unique_ptr<Cache>> caches_;
  double loss_sum_ = 0;
};

}  // namespace meshwork::exec::cuda::chunk_detail
