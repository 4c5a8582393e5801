#include "exec/cuda/cuda_chunk.hpp"

#include <cuda_bf16.h>

#include <map>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "exec/cuda/chunk_kernels.hpp"
#include "exec/cuda/gpt_cuda.hpp"
#include "exec/cuda/gpt_kernels.hpp"
#include "exec/cuda/materialised_attention.hpp"
#include "exec/gpt_detail.hpp"
#include "exec/params.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/flash_attention.hpp"
#include "kernels/cuda/gelu.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/swiglu.hpp"

namespace meshwork::exec::cuda {

namespace {

using I = std::int64_t;
using models::OpPhase;

// Parameters start on 128-element boundaries, as CudaGpt's (cuBLASLt's default alignment).
constexpr I kAlign = 128;
// What the materialised attention leaves free: as CudaGpt's kAutomaticReserveBytes.
constexpr std::size_t kReserveBytes = std::size_t{2} << 30;

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
  void ep_collective(std::string_view what, OpPhase, std::int64_t, int) override {
    throw std::logic_error("the CUDA chunk has no MoE layers (" + std::string(what) + ")");
  }
  void cp_collective(std::string_view what, OpPhase, std::int64_t, int) override {
    throw std::logic_error("the CUDA chunk has no context parallelism (" + std::string(what) + ")");
  }
  [[nodiscard]] double loss_sum() const override { return loss_sum_; }
  void reset_loss() override { loss_sum_ = 0; }
  [[nodiscard]] Index local_rows(Index tokens) const override { return sp_ ? tokens / t_ : tokens; }
  [[nodiscard]] std::vector<ParamSlot> slots() override;
  void release_values() override;
  void allocate_values() override;
  void values_changed() override;
  void zero_grads() override;

 private:
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
  void weight_grad(const DMat& in, const DMat& d, const std::string& name) const;
  void bias_grad(const DMat& d, const std::string& name) const;
  void add_bias_if(DMat& x, const std::string& name) const;
  DMat add(const DMat& a, const DMat& b) const;
  DMat norm_forward(const DMat& x, const std::string& name, DVec& mean, DVec& rstd) const;
  DMat norm_backward(const DMat& dy, const DMat& x, const std::string& name, const DVec& mean, const DVec& rstd) const;
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
  I heads_, groups_, hd_, vocab_local_, vocab_begin_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> order_;  // the chunk's parameter order (GptChunk's)
  I flat_size_[2] = {0, 0};
  Dev<float> values_[2], grads_[2];
  Dev<bf16> copies_[2];
  Dev<double2> rope_table_;
  std::map<int, std::unique_ptr<Cache>> caches_;
  double loss_sum_ = 0;
};

CudaChunk::CudaChunk(const ChunkConfig& c, DeviceContext& ctx)
    : ctx_(ctx), s_(ctx.stream), m_(c.model), first_layer_(c.first_layer), layers_(c.layers), embedding_(c.embedding), head_(c.head),
      rope_(c.model.position_embedding_type == plan::PositionEmbedding::rope), ln_(c.model.normalization == plan::Normalization::layernorm),
      swiglu_(c.model.activation == plan::Activation::swiglu), bias_(c.model.add_bias_linear), tied_(!c.model.untie_embeddings_and_output_weights), tp_(c.tp) {
  t_ = tp_.group->size();
  r_ = tp_.group->rank();
  sp_ = tp_.sequence_parallel;
  heads_ = m_.num_attention_heads / t_;
  groups_ = m_.num_query_groups / t_;
  hd_ = m_.kv_channels;
  vocab_local_ = m_.vocab_size / t_;
  vocab_begin_ = r_ * vocab_local_;
  // GptChunk's parameters, in its order, this rank's shards.
  std::vector<ParamSpec> specs;
  if (embedding_) specs = embedding_specs(m_);
  for (I l = first_layer_; l < first_layer_ + layers_; ++l) {
    auto ls = layer_specs(m_, l);
    specs.insert(specs.end(), ls.begin(), ls.end());
  }
  if (head_) {
    auto hs = head_specs(m_);
    specs.insert(specs.end(), hs.begin(), hs.end());
    if (tied_ && !embedding_) specs.push_back(embedding_specs(m_).front());
  }
  std::vector<std::pair<const Entry*, Mat>> initial;
  for (auto& spec : specs) {
    Mat value = shard(initial_value(spec, c.seed), spec.split, r_, t_);
    Entry e{spec, value.rows(), value.cols(), spec.is_expert() ? 1 : 0, 0};
    e.offset = flat_size_[e.flat];
    flat_size_[e.flat] += (e.rows * e.cols + kAlign - 1) / kAlign * kAlign;
    order_.push_back(spec.name);
    auto [it, fresh] = entries_.emplace(spec.name, std::move(e));
    if (!fresh) throw std::logic_error("CudaChunk: parameter " + spec.name + " twice");
    initial.emplace_back(&it->second, std::move(value));
  }
  for (int f = 0; f < 2; ++f) {
    values_[f] = Dev<float>(flat_size_[f], 1, s_);
    grads_[f] = Dev<float>(flat_size_[f], 1, s_);
    copies_[f] = Dev<bf16>(flat_size_[f], 1, s_);
    if (flat_size_[f] > 0) {
      MESHWORK_CUDA_CHECK(cudaMemsetAsync(values_[f].data(), 0, values_[f].bytes(), s_));
      MESHWORK_CUDA_CHECK(cudaMemsetAsync(grads_[f].data(), 0, grads_[f].bytes(), s_));
    }
  }
  for (const auto& [e, value] : initial) {
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(values_[e->flat].data() + e->offset, value.data(), static_cast<std::size_t>(value.size()) * sizeof(float),
                                        cudaMemcpyHostToDevice, s_));
  }
  values_changed();
  if (rope_) {
    rope_table_ = Dev<double2>(m_.seq_length * (hd_ / 2), 1, s_);
    gpt_rope_table(rope_table_.data(), m_.seq_length, hd_, s_);
  }
  MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s_));  // the host values may go
}

const Entry& CudaChunk::entry(std::string_view name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw std::logic_error("CudaChunk: no parameter " + std::string(name));
  return it->second;
}
bf16* CudaChunk::W(std::string_view name) const {
  const Entry& e = entry(name);
  if (copies_[e.flat].empty()) throw std::logic_error("CudaChunk: " + std::string(name) + " is released (ZeRO-3) while an op reads it");
  return copies_[e.flat].data() + e.offset;
}
float* CudaChunk::G(std::string_view name) const {
  const Entry& e = entry(name);
  return grads_[e.flat].data() + e.offset;
}

std::vector<ParamSlot> CudaChunk::slots() {
  std::vector<ParamSlot> out;
  for (const auto& name : order_) {
    const Entry& e = entries_.at(name);
    const auto n = static_cast<std::size_t>(e.rows * e.cols);
    float* value = values_[e.flat].empty() ? nullptr : values_[e.flat].data() + e.offset;
    out.push_back({&e.spec, e.rows, e.cols, {value, value == nullptr ? 0 : n}, {grads_[e.flat].data() + e.offset, n}});
  }
  return out;
}
void CudaChunk::release_values() {
  values_[0] = Dev<float>();
  copies_[0] = Dev<bf16>();
}
void CudaChunk::allocate_values() {
  if (values_[0].empty() && flat_size_[0] > 0) {
    values_[0] = Dev<float>(flat_size_[0], 1, s_);
    copies_[0] = Dev<bf16>(flat_size_[0], 1, s_);
    MESHWORK_CUDA_CHECK(cudaMemsetAsync(values_[0].data(), 0, values_[0].bytes(), s_));  // the padding stays 0
  }
}
void CudaChunk::values_changed() {
  for (int f = 0; f < 2; ++f) {
    if (!values_[f].empty()) convert(values_[f].data(), copies_[f].data(), flat_size_[f], s_);
  }
}
void CudaChunk::zero_grads() {
  for (auto& g : grads_) {
    if (!g.empty()) MESHWORK_CUDA_CHECK(cudaMemsetAsync(g.data(), 0, g.bytes(), s_));
  }
}

CudaChunk::Cache& CudaChunk::cache(int mb) {
  const auto it = caches_.find(mb);
  if (it == caches_.end()) throw std::logic_error("micro-batch " + std::to_string(mb) + " has no forward on this chunk");
  return *it->second;
}
CudaChunk::LayerCache& CudaChunk::layer_cache(Cache& c, I layer) {
  if (layer < first_layer_ || layer >= first_layer_ + layers_) throw std::logic_error("layer " + std::to_string(layer) + " is not on this chunk");
  return c.layers[static_cast<std::size_t>(layer - first_layer_)];
}

void CudaChunk::begin_forward(int mb, const Batch& batch, double loss_scale) {
  auto c = std::make_unique<Cache>();
  c->layers.resize(static_cast<std::size_t>(layers_));
  c->batch = batch;
  if (c->batch.positions.empty()) {
    c->batch.positions.resize(static_cast<std::size_t>(batch.seq));
    std::iota(c->batch.positions.begin(), c->batch.positions.end(), Index{0});
  }
  c->npos = static_cast<I>(c->batch.positions.size());
  for (std::size_t i = 0; i < batch.ids.size(); ++i) {
    if (batch.ids[i] < 0 || batch.ids[i] >= m_.vocab_size || batch.targets[i] < 0 || batch.targets[i] >= m_.vocab_size) {
      throw std::invalid_argument("CudaChunk: token " + std::to_string(i) + " is outside the vocabulary of " + std::to_string(m_.vocab_size));
    }
  }
  auto upload = [&](const std::vector<std::int64_t>& host) {
    Dev<std::int64_t> d(static_cast<I>(host.size()), 1, s_);
    if (!host.empty()) MESHWORK_CUDA_CHECK(cudaMemcpyAsync(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice, s_));
    return d;
  };
  c->ids = upload(batch.ids);
  c->targets = upload(batch.targets);
  c->positions = upload(std::vector<std::int64_t>(c->batch.positions.begin(), c->batch.positions.end()));
  c->loss_scale = loss_scale;
  MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s_));  // the host vectors above are temporaries
  caches_[mb] = std::move(c);
}
void CudaChunk::begin_backward(int mb) {
  Cache& c = cache(mb);
  c.cur = DMat();
  c.res = DMat();
}

std::span<float> CudaChunk::receive(int mb, Index rows, Index cols) {
  Cache& c = cache(mb);
  c.staging = DVec(rows, cols, s_);
  c.received = true;
  return {c.staging.data(), static_cast<std::size_t>(c.staging.size())};
}
std::span<const float> CudaChunk::flowing(int mb) {
  Cache& c = cache(mb);
  settle(c);
  c.staging = DVec(c.cur.rows(), c.cur.cols(), s_);
  widen(c.cur.data(), c.staging.data(), c.cur.size(), s_);
  return {c.staging.data(), static_cast<std::size_t>(c.staging.size())};
}
void CudaChunk::settle(Cache& c) {
  if (!c.received) return;
  c.cur = DMat(c.staging.rows(), c.staging.cols(), s_);
  convert(c.staging.data(), c.cur.data(), c.staging.size(), s_);
  c.staging = DVec();
  c.received = false;
}

DMat CudaChunk::clone(const DMat& x) const {
  DMat y(x.rows(), x.cols(), s_);
  if (!x.empty()) MESHWORK_CUDA_CHECK(cudaMemcpyAsync(y.data(), x.data(), x.bytes(), cudaMemcpyDeviceToDevice, s_));
  return y;
}
// a [rows, k] times w ([k, n], or [n, k] transposed).
DMat CudaChunk::matmul(const DMat& a, const bf16* w, I n, bool trans_b) const {
  DMat y(a.rows(), n, s_);
  ctx_.gemm.matmul(a.data(), w, y.data(), a.rows(), n, a.cols(), false, trans_b, 1.0F, 0.0F, s_);
  return y;
}
void CudaChunk::weight_grad(const DMat& in, const DMat& d, const std::string& name) const {
  ctx_.gemm.matmul(in.data(), d.data(), G(name), in.cols(), d.cols(), in.rows(), true, false, 1.0F, 1.0F, s_);
}
void CudaChunk::bias_grad(const DMat& d, const std::string& name) const {
  if (bias_ && has(name)) accumulate_column_sums(d.data(), G(name), d.rows(), d.cols(), s_);
}
void CudaChunk::add_bias_if(DMat& x, const std::string& name) const {
  if (bias_ && has(name)) add_bias(x.data(), W(name), x.rows(), x.cols(), s_);
}
DMat CudaChunk::add(const DMat& a, const DMat& b) const {
  if (a.size() != b.size()) throw std::logic_error("CudaChunk: adding tensors of " + std::to_string(a.size()) + " and " + std::to_string(b.size()) + " values");
  DMat y(a.rows(), a.cols(), s_);
  exec::cuda::add(a.data(), b.data(), y.data(), a.size(), s_);
  return y;
}
DMat CudaChunk::norm_forward(const DMat& x, const std::string& name, DVec& mean, DVec& rstd) const {
  DMat y(x.rows(), x.cols(), s_);
  mean = DVec(x.rows(), 1, s_);
  rstd = DVec(x.rows(), 1, s_);
  if (ln_) {
    kernels::cuda::layernorm_forward<bf16>(x.data(), W(name + ".gamma"), W(name + ".beta"), y.data(), mean.data(), rstd.data(), x.rows(), x.cols(),
                                           detail::kNormEps, s_);
  } else {
    kernels::cuda::rmsnorm_forward<bf16>(x.data(), W(name + ".gamma"), y.data(), rstd.data(), x.rows(), x.cols(), detail::kNormEps, s_);
  }
  return y;
}
DMat CudaChunk::norm_backward(const DMat& dy, const DMat& x, const std::string& name, const DVec& mean, const DVec& rstd) const {
  DMat dx(x.rows(), x.cols(), s_);
  DVec dgamma(x.cols(), 1, s_), dbeta(x.cols(), 1, s_);
  if (ln_) {
    kernels::cuda::layernorm_backward<bf16>(dy.data(), x.data(), W(name + ".gamma"), mean.data(), rstd.data(), dx.data(), dgamma.data(), dbeta.data(), x.rows(),
                                            x.cols(), s_);
    accumulate(dbeta.data(), G(name + ".beta"), x.cols(), s_);
  } else {
    kernels::cuda::rmsnorm_backward<bf16>(dy.data(), x.data(), W(name + ".gamma"), rstd.data(), dx.data(), dgamma.data(), x.rows(), x.cols(), s_);
  }
  accumulate(dgamma.data(), G(name + ".gamma"), x.cols(), s_);
  return dx;
}

void CudaChunk::tp_collective(models::Collective coll, OpPhase phase, int mb) {
  Cache& c = cache(mb);
  settle(c);
  DMat& x = phase == OpPhase::recompute ? c.rcur : c.cur;
  Group& g = *tp_.group;
  const auto t = static_cast<I>(g.size());
  DVec wide(x.rows(), x.cols(), s_);
  widen(x.data(), wide.data(), x.size(), s_);
  auto span_of = [](DVec& v) { return std::span<float>(v.data(), static_cast<std::size_t>(v.size())); };
  switch (coll) {
    case models::Collective::all_gather: {
      DVec out(x.rows() * t, x.cols(), s_);
      g.all_gather(span_of(wide), span_of(out));
      x = DMat(out.rows(), out.cols(), s_);
      convert(out.data(), x.data(), out.size(), s_);
      return;
    }
    case models::Collective::reduce_scatter: {
      DVec out(x.rows() / t, x.cols(), s_);
      g.reduce_scatter_sum(span_of(wide), span_of(out));
      x = DMat(out.rows(), out.cols(), s_);
      convert(out.data(), x.data(), out.size(), s_);
      return;
    }
    case models::Collective::all_reduce:
      g.all_reduce_sum(span_of(wide));
      convert(wide.data(), x.data(), wide.size(), s_);
      return;
    default: throw std::logic_error("a TP instruction the CUDA chunk does not know: " + std::string(models::to_string(coll)));
  }
}

void CudaChunk::run(std::string_view op, OpPhase phase, std::int64_t layer, int mb) {
  Cache& c = cache(mb);
  settle(c);
  if (layer < 0) run_end_op(op, phase, c);
  else run_layer_op(op, phase, layer, c);
}

// GptChunk::run_end_op on the device.
void CudaChunk::run_end_op(std::string_view op, OpPhase phase, Cache& c) {
  const I H = m_.hidden_size;
  if (op == "embedding" && phase == OpPhase::forward) {
    const I n = static_cast<I>(c.batch.ids.size());
    c.cur = DMat(n, H, s_);
    const bf16* position = r_ == 0 && !rope_ ? W("embedding.position") : nullptr;
    vp_embedding_forward(c.ids.data(), W("embedding.word"), vocab_begin_, vocab_local_, position, c.positions.data(), c.npos, c.cur.data(), n, H, s_);
  } else if (op == "embedding" && phase == OpPhase::backward_weight) {
    if (!rope_ && (!sp_ || r_ == 0)) position_backward(c.cur.data(), G("embedding.position"), c.positions.data(), c.npos, c.cur.rows(), H, s_);
    vp_embedding_backward_word(c.ids.data(), c.cur.data(), G("embedding.word"), vocab_begin_, vocab_local_, c.cur.rows(), H, s_);
    c.cur = DMat();
  } else if (op == "final_norm" && phase == OpPhase::forward) {
    c.head_x = std::move(c.cur);
    c.cur = norm_forward(c.head_x, "final_norm", c.nf_mean, c.nf_rstd);
  } else if (op == "final_norm" && phase == OpPhase::backward_input) {
    c.cur = norm_backward(c.cur, c.head_x, "final_norm", c.nf_mean, c.nf_rstd);
  } else if (op == "lm_head" && phase == OpPhase::forward) {
    c.head_y = std::move(c.cur);
    c.logits = tied_ ? matmul(c.head_y, W("embedding.word"), vocab_local_, true) : matmul(c.head_y, W("head.weight"), vocab_local_, false);
  } else if (op == "lm_head" && phase == OpPhase::backward_input) {
    c.cur = tied_ ? matmul(c.dlogits, W("embedding.word"), H, false) : matmul(c.dlogits, W("head.weight"), H, true);
  } else if (op == "lm_head" && phase == OpPhase::backward_weight) {
    if (tied_) weight_grad(c.dlogits, c.head_y, "embedding.word");  // [vocab_local, H] += dlogits^T head_y
    else weight_grad(c.head_y, c.dlogits, "head.weight");
  } else if (op == "loss" && phase == OpPhase::forward) {
    // Vocabulary-parallel cross-entropy: the row maxima and the two partial sums all-reduced
    // over TP inside this instruction, as GptChunk's.
    const I rows = c.logits.rows();
    DVec max(rows, 1, s_), sum_exp(rows, 1, s_), target(rows, 1, s_), loss(rows, 1, s_);
    auto span_of = [](DVec& v) { return std::span<float>(v.data(), static_cast<std::size_t>(v.size())); };
    vp_local_max(c.logits.data(), max.data(), rows, vocab_local_, s_);
    tp_.group->all_reduce_max(span_of(max));
    vp_partial_sums(c.logits.data(), max.data(), c.targets.data(), vocab_begin_, sum_exp.data(), target.data(), rows, vocab_local_, s_);
    tp_.group->all_reduce_sum(span_of(sum_exp));
    tp_.group->all_reduce_sum(span_of(target));
    vp_loss_and_grad(c.logits.data(), max.data(), sum_exp.data(), target.data(), c.targets.data(), vocab_begin_, loss.data(), c.logits.data(), rows,
                     vocab_local_, static_cast<float>(c.loss_scale / static_cast<double>(rows)), s_);
    c.dlogits = std::move(c.logits);
    std::vector<float> host(static_cast<std::size_t>(rows));
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(host.data(), loss.data(), loss.bytes(), cudaMemcpyDeviceToHost, s_));
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s_));
    loss_sum_ += std::accumulate(host.begin(), host.end(), 0.0) / static_cast<double>(rows);
  } else if (op == "loss" && phase == OpPhase::backward_input) {
    // The logits' gradient came with the loss.
  } else {
    throw std::logic_error("the CUDA chunk has no op '" + std::string(op) + "' in phase " + std::string(models::to_string(phase)) + " outside the layers");
  }
}

// GptChunk::run_layer_op on the device.
void CudaChunk::run_layer_op(std::string_view op, OpPhase phase, I l, Cache& c) {
  LayerCache& lc = layer_cache(c, l);
  const I H = m_.hidden_size;
  const bool recompute = phase == OpPhase::recompute;
  const bool forward = phase == OpPhase::forward || recompute;
  DMat& cur = recompute ? c.rcur : c.cur;
  DMat& res = recompute ? c.rres : c.res;
  const std::string p = "layers." + std::to_string(l) + ".";
  const I ffn_local = m_.ffn_hidden_size / t_, ffn_in_local = ffn_local * (swiglu_ ? 2 : 1);
  const I q_cols = heads_ * hd_, kv_cols = groups_ * hd_;
  if (forward) {
    if (op == "input_norm") {
      if (!recompute) lc.x = std::move(cur);
      res = clone(lc.x);
      cur = norm_forward(lc.x, p + "ln1", lc.mean1, lc.rstd1);
    } else if (op == "qkv") {
      lc.y1 = std::move(cur);
      lc.q = matmul(lc.y1, W(p + "q.weight"), q_cols, false);
      lc.k = matmul(lc.y1, W(p + "k.weight"), kv_cols, false);
      lc.v = matmul(lc.y1, W(p + "v.weight"), kv_cols, false);
      add_bias_if(lc.q, p + "q.bias");
      add_bias_if(lc.k, p + "k.bias");
      add_bias_if(lc.v, p + "v.bias");
      if (rope_) {
        rope_at(lc.q.data(), rope_table_.data(), c.positions.data(), c.npos, lc.q.rows(), heads_, hd_, false, s_);
        rope_at(lc.k.data(), rope_table_.data(), c.positions.data(), c.npos, lc.k.rows(), groups_, hd_, false, s_);
      }
    } else if (op == "attention") {
      const I rows = lc.q.rows(), seq = c.npos, samples = rows / seq, bh = samples * heads_;
      lc.qh = DMat(bh * seq, hd_, s_);
      lc.kh = DMat(bh * seq, hd_, s_);
      lc.vh = DMat(bh * seq, hd_, s_);
      lc.atth = DMat(bh * seq, hd_, s_);
      lc.lse = DVec(bh * seq, 1, s_);
      rows_to_heads(lc.q.data(), lc.qh.data(), samples, seq, heads_, heads_, hd_, s_);
      rows_to_heads(lc.k.data(), lc.kh.data(), samples, seq, heads_, groups_, hd_, s_);
      rows_to_heads(lc.v.data(), lc.vh.data(), samples, seq, heads_, groups_, hd_, s_);
      bool materialised = false;
      if (seq >= kMaterialisedMinSeq) {
        std::size_t free_bytes = 0, total_bytes = 0;
        MESHWORK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        materialised = materialised_attention_probs_bytes(bh, seq) * 2 + kReserveBytes <= free_bytes;
      }
      if (materialised) {
        lc.probs = DMat(bh * seq, seq, s_);
        materialised_attention_forward(ctx_.gemm, lc.qh.data(), lc.kh.data(), lc.vh.data(), lc.probs.data(), lc.atth.data(), bh, seq, hd_, s_,
                                       causal_row_blocks(seq));
      } else if (hd_ <= kernels::cuda::kFlashMaxHeadDim) {
        lc.probs = DMat();
        kernels::cuda::flash_attention_forward<bf16>(lc.qh.data(), lc.kh.data(), lc.vh.data(), lc.atth.data(), lc.lse.data(), bh, seq, hd_, s_);
      } else {
        lc.probs = DMat();
        kernels::cuda::causal_attention_forward<bf16>(lc.qh.data(), lc.kh.data(), lc.vh.data(), lc.atth.data(), lc.lse.data(), bh, seq, hd_, s_);
      }
      lc.att = DMat(rows, q_cols, s_);
      heads_to_rows(lc.atth.data(), lc.att.data(), samples, seq, heads_, heads_, hd_, s_);
    } else if (op == "attention_out") {
      cur = matmul(lc.att, W(p + "o.weight"), H, false);
    } else if (op == "attention_residual") {
      add_bias_if(cur, p + "o.bias");
      cur = add(res, cur);
      lc.x1 = clone(cur);
    } else if (op == "mlp_norm") {
      res = clone(cur);
      cur = norm_forward(cur, p + "ln2", lc.mean2, lc.rstd2);
    } else if (op == "mlp_fc1") {
      lc.y2 = std::move(cur);
      lc.u = matmul(lc.y2, W(p + "fc1.weight"), ffn_in_local, false);
    } else if (op == "mlp_act") {
      lc.a = DMat(lc.u.rows(), ffn_local, s_);
      if (swiglu_) {
        add_bias_if(lc.u, p + "fc1.bias");  // as the CPU: the bias joins u before SwiGLU
        kernels::cuda::swiglu_forward<bf16>(lc.u.data(), lc.a.data(), lc.u.rows(), ffn_local, s_);
      } else {
        kernels::cuda::bias_gelu_forward<bf16>(lc.u.data(), bias_ ? W(p + "fc1.bias") : nullptr, lc.a.data(), lc.u.rows(), ffn_local, s_);
      }
    } else if (op == "mlp_fc2") {
      cur = matmul(lc.a, W(p + "fc2.weight"), H, false);
    } else if (op == "mlp_residual") {
      add_bias_if(cur, p + "fc2.bias");
      cur = add(res, cur);
    } else {
      throw std::logic_error("the CUDA chunk has no layer op '" + std::string(op) + "' in phase " + std::string(models::to_string(phase)));
    }
    return;
  }
  if (phase == OpPhase::backward_input) {
    if (op == "mlp_residual") {
      res = clone(cur);
      bias_grad(cur, p + "fc2.bias");
    } else if (op == "mlp_fc2") {
      lc.dmf = std::move(cur);
      cur = matmul(lc.dmf, W(p + "fc2.weight"), ffn_local, true);
    } else if (op == "mlp_act") {
      DMat du(lc.u.rows(), ffn_in_local, s_);
      if (swiglu_) {
        kernels::cuda::swiglu_backward<bf16>(cur.data(), lc.u.data(), du.data(), lc.u.rows(), ffn_local, s_);
      } else {
        kernels::cuda::bias_gelu_backward<bf16>(cur.data(), lc.u.data(), bias_ ? W(p + "fc1.bias") : nullptr, du.data(), nullptr, lc.u.rows(), ffn_local, s_);
      }
      cur = std::move(du);
      bias_grad(cur, p + "fc1.bias");
    } else if (op == "mlp_fc1") {
      lc.du = std::move(cur);
      cur = matmul(lc.du, W(p + "fc1.weight"), H, true);
    } else if (op == "mlp_norm") {
      cur = add(norm_backward(cur, lc.x1, p + "ln2", lc.mean2, lc.rstd2), res);
    } else if (op == "attention_residual") {
      res = clone(cur);
      bias_grad(cur, p + "o.bias");
    } else if (op == "attention_out") {
      lc.dof = std::move(cur);
      cur = matmul(lc.dof, W(p + "o.weight"), q_cols, true);
    } else if (op == "attention") {
      const I rows = cur.rows(), seq = c.npos, samples = rows / seq, bh = samples * heads_;
      DMat dh(bh * seq, hd_, s_), dqh(bh * seq, hd_, s_), dkh(bh * seq, hd_, s_), dvh(bh * seq, hd_, s_);
      rows_to_heads(cur.data(), dh.data(), samples, seq, heads_, heads_, hd_, s_);
      if (!lc.probs.empty()) {
        DMat scratch(bh * seq, seq, s_);
        materialised_attention_backward(ctx_.gemm, dh.data(), lc.qh.data(), lc.kh.data(), lc.vh.data(), lc.probs.data(), scratch.data(), dqh.data(), dkh.data(),
                                        dvh.data(), bh, seq, hd_, s_, causal_row_blocks(seq));
      } else {
        kernels::cuda::causal_attention_backward<bf16>(dh.data(), lc.qh.data(), lc.kh.data(), lc.vh.data(), lc.atth.data(), lc.lse.data(), dqh.data(),
                                                       dkh.data(), dvh.data(), bh, seq, hd_, s_);
      }
      lc.dq = DMat(rows, q_cols, s_);
      lc.dk = DMat(rows, kv_cols, s_);
      lc.dv = DMat(rows, kv_cols, s_);
      heads_to_rows(dqh.data(), lc.dq.data(), samples, seq, heads_, heads_, hd_, s_);
      heads_to_rows(dkh.data(), lc.dk.data(), samples, seq, heads_, groups_, hd_, s_);  // GQA: a group's heads summed
      heads_to_rows(dvh.data(), lc.dv.data(), samples, seq, heads_, groups_, hd_, s_);
      if (rope_) {
        rope_at(lc.dq.data(), rope_table_.data(), c.positions.data(), c.npos, rows, heads_, hd_, true, s_);
        rope_at(lc.dk.data(), rope_table_.data(), c.positions.data(), c.npos, rows, groups_, hd_, true, s_);
      }
      for (DMat* kept : {&lc.qh, &lc.kh, &lc.vh, &lc.atth, &lc.probs}) *kept = DMat();
      lc.lse = DVec();
      cur = DMat();
    } else if (op == "qkv") {
      bias_grad(lc.dq, p + "q.bias");
      bias_grad(lc.dk, p + "k.bias");
      bias_grad(lc.dv, p + "v.bias");
      // dy1 = dq Wq^T + dk Wk^T + dv Wv^T, summed in fp32 and rounded once.
      const I rows = lc.dq.rows();
      DVec sum(rows, H, s_);
      ctx_.gemm.matmul(lc.dq.data(), W(p + "q.weight"), sum.data(), rows, H, q_cols, false, true, 1.0F, 0.0F, s_);
      ctx_.gemm.matmul(lc.dk.data(), W(p + "k.weight"), sum.data(), rows, H, kv_cols, false, true, 1.0F, 1.0F, s_);
      ctx_.gemm.matmul(lc.dv.data(), W(p + "v.weight"), sum.data(), rows, H, kv_cols, false, true, 1.0F, 1.0F, s_);
      cur = DMat(rows, H, s_);
      convert(sum.data(), cur.data(), sum.size(), s_);
    } else if (op == "input_norm") {
      cur = add(norm_backward(cur, lc.x, p + "ln1", lc.mean1, lc.rstd1), res);
    } else {
      throw std::logic_error("the CUDA chunk has no layer op '" + std::string(op) + "' in phase backward_input");
    }
    return;
  }
  // Weight gradients, from what the input-gradient halves kept.
  if (op == "mlp_fc2") {
    weight_grad(lc.a, lc.dmf, p + "fc2.weight");
    lc.dmf = DMat();
  } else if (op == "mlp_fc1") {
    weight_grad(lc.y2, lc.du, p + "fc1.weight");
    lc.du = DMat();
  } else if (op == "attention_out") {
    weight_grad(lc.att, lc.dof, p + "o.weight");
    lc.dof = DMat();
  } else if (op == "qkv") {
    weight_grad(lc.y1, lc.dq, p + "q.weight");
    weight_grad(lc.y1, lc.dk, p + "k.weight");
    weight_grad(lc.y1, lc.dv, p + "v.weight");
    for (DMat* kept : {&lc.dq, &lc.dk, &lc.dv}) *kept = DMat();
  } else {
    throw std::logic_error("the CUDA chunk has no layer op '" + std::string(op) + "' in phase backward_weight");
  }
}

}  // namespace

std::vector<std::string> cuda_chunk_limits(const plan::ModelConfig& model, bool context_parallel) {
  std::vector<std::string> out;
  if (model.is_moe()) out.emplace_back("model.moe: MoE layers (the router, token permutation and grouped expert GEMMs have no CUDA kernels in meshwork yet)");
  if (context_parallel) out.emplace_back("parallelism.context_parallel_size: context parallelism (attention over another member's block needs a position-masked kernel)");
  if (model.kv_channels % 2 != 0 && model.position_embedding_type == plan::PositionEmbedding::rope) out.emplace_back("model.kv_channels: RoPE turns dimensions in pairs");
  return out;
}

std::unique_ptr<Chunk> make_cuda_chunk(const ChunkConfig& config, DeviceContext& context) {
  const auto limits = cuda_chunk_limits(config.model, config.cp != nullptr && config.cp->size() > 1);
  if (!limits.empty()) {
    std::string text = "the CUDA backend cannot run this plan yet:";
    for (std::size_t i = 0; i < limits.size(); ++i) text += (i == 0 ? " " : "; ") + limits[i];
    throw std::invalid_argument(text);
  }
  return std::make_unique<CudaChunk>(config, context);
}

}  // namespace meshwork::exec::cuda
