#include "exec/cuda/cuda_chunk_impl.hpp"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <map>
#include <numeric>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "exec/cuda/chunk_kernels.hpp"
#include "exec/cuda/fp8_kernels.hpp"
#include "exec/cuda/gpt_cuda.hpp"
#include "exec/cuda/gpt_kernels.hpp"
#include "exec/cuda/materialised_attention.hpp"
#include "exec/gpt_detail.hpp"
#include "exec/params.hpp"
#include "kernels/context_parallel_attention.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/flash_attention.hpp"
#include "kernels/cuda/gelu.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/swiglu.hpp"

namespace meshwork::exec::cuda {

namespace chunk_detail {

CudaChunk::CudaChunk(const ChunkConfig& c, DeviceContext& ctx)
    : ctx_(ctx), s_(ctx.stream), m_(c.model), first_layer_(c.first_layer), layers_(c.layers), embedding_(c.embedding), head_(c.head),
      rope_(c.model.position_embedding_type == plan::PositionEmbedding::rope), ln_(c.model.normalization == plan::Normalization::layernorm),
      swiglu_(c.model.activation == plan::Activation::swiglu), bias_(c.model.add_bias_linear), tied_(!c.model.untie_embeddings_and_output_weights), tp_(c.tp) {
  t_ = tp_.group->size();
  r_ = tp_.group->rank();
  sp_ = tp_.sequence_parallel;
  fp8_ = c.fp8_gemms;
  if (fp8_ && !ctx_.gemm.supports_fp8()) {
    int device = 0, major = 0, minor = 0;
    MESHWORK_CUDA_CHECK(cudaGetDevice(&device));
    MESHWORK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MESHWORK_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    throw std::invalid_argument("training.precision fp8: this GPU (compute capability " + std::to_string(major) + "." + std::to_string(minor) +
                                ") has no FP8 GEMMs, which need 8.9 or more (Ada, Hopper, Blackwell); run the plan with training.precision bf16");
  }
  heads_ = m_.num_attention_heads / t_;
  groups_ = m_.num_query_groups / t_;
  hd_ = m_.kv_channels;
  vocab_local_ = m_.vocab_size / t_;
  vocab_begin_ = r_ * vocab_local_;
  own_ep_ = c.ep == nullptr ? std::make_unique<LocalGroup>("ep") : nullptr;
  ep_ = c.ep == nullptr ? own_ep_.get() : c.ep;
  if (m_.is_moe() && m_.moe.num_moe_experts % ep_->size() != 0) throw std::invalid_argument("expert parallelism does not divide the experts");
  if (c.cp != nullptr && c.cp->size() > 1) {
    cp_ = c.cp;
    cp_size_ = cp_->size();
    cp_rank_ = cp_->rank();
    std::vector<std::int64_t> keys;
    for (int member = 0; member < cp_size_; ++member) {
      for (const Index p : kernels::context_parallel_positions(m_.seq_length, cp_size_, member, c.cp_load_balance)) keys.push_back(p);
    }
    key_positions_ = Dev<std::int64_t>(static_cast<I>(keys.size()), 1, s_);
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(key_positions_.data(), keys.data(), key_positions_.bytes(), cudaMemcpyHostToDevice, s_));
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s_));
  }
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
    if (spec.is_expert() && expert_owner(spec.expert, m_.moe.num_moe_experts, ep_->size()) != ep_->rank()) continue;  // another EP rank's
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
  const std::vector<std::int64_t> positions(c->batch.positions.begin(), c->batch.positions.end());
  c->positions = upload(positions);
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
DMat CudaChunk::linear(const DMat& a, const bf16* w, I n, bool trans_b) const {
  const I rows = a.rows(), k = a.cols();
  // A shape cuBLASLt's e4m3 kernels do not take (gemm.hpp: k a multiple of 16, n of 8) runs in
  // bf16; validate warns of it for the plan (plan/backend_limits.cpp).
  if (!fp8_ || k % 16 != 0 || n % 8 != 0) return matmul(a, w, n, trans_b);
  DMat y(rows, n, s_);
  if (rows == 0) return y;
  Dev<__nv_fp8_e4m3> a8(rows, k, s_), w8(n, k, s_);
  DVec scales(2, kFp8ScaleFloats, s_);  // a's, then w's (each row 32 bytes from an aligned base)
  float* a_scales = scales.data();
  float* w_scales = scales.data() + kFp8ScaleFloats;
  quantize_e4m3(a.data(), rows, k, false, a8.data(), a_scales, s_);
  // The e4m3 GEMM takes the weight as [n, k] (gemm.hpp): as stored when transposed, else cast transposed.
  if (trans_b) quantize_e4m3(w, n, k, false, w8.data(), w_scales, s_);
  else quantize_e4m3(w, k, n, true, w8.data(), w_scales, s_);
  ctx_.gemm.matmul_fp8(a8.data(), w8.data(), y.data(), rows, n, k, a_scales + kFp8DequantSlot, w_scales + kFp8DequantSlot, 1.0F, 0.0F, s_);
  return y;
}
void CudaChunk::linear_into(const DMat& a, const bf16* w, float* y, I n, bool trans_b, bool accumulate) const {
  if (!fp8_ || a.cols() % 16 != 0 || n % 8 != 0) {
    ctx_.gemm.matmul(a.data(), w, y, a.rows(), n, a.cols(), false, trans_b, 1.0F, accumulate ? 1.0F : 0.0F, s_);
    return;
  }
  const DMat product = linear(a, w, n, trans_b);
  widen_into(product.data(), y, product.size(), accumulate, s_);
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

DMat CudaChunk::gather_rows(Group& g, const DMat& x) const {
  DVec wide(x.rows(), x.cols(), s_), out(x.rows() * g.size(), x.cols(), s_);
  widen(x.data(), wide.data(), x.size(), s_);
  g.all_gather(std::span<const float>(wide.data(), static_cast<std::size_t>(wide.size())), std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
  DMat y(out.rows(), out.cols(), s_);
  convert(out.data(), y.data(), out.size(), s_);
  return y;
}
DMat CudaChunk::reduce_scatter_rows(Group& g, const DMat& x) const {
  DVec wide(x.rows(), x.cols(), s_), out(x.rows() / g.size(), x.cols(), s_);
  widen(x.data(), wide.data(), x.size(), s_);
  g.reduce_scatter_sum(std::span<const float>(wide.data(), static_cast<std::size_t>(wide.size())), std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
  DMat y(out.rows(), out.cols(), s_);
  convert(out.data(), y.data(), out.size(), s_);
  return y;
}

void CudaChunk::tp_collective(models::Collective coll, OpPhase phase, int mb) {
  Cache& c = cache(mb);
  settle(c);
  DMat& x = phase == OpPhase::recompute ? c.rcur : c.cur;
  Group& g = *tp_.group;
  switch (coll) {
    case models::Collective::all_gather: x = gather_rows(g, x); return;
    case models::Collective::reduce_scatter: x = reduce_scatter_rows(g, x); return;
    case models::Collective::all_reduce: {
      DVec wide(x.rows(), x.cols(), s_);
      widen(x.data(), wide.data(), x.size(), s_);
      g.all_reduce_sum(std::span<float>(wide.data(), static_cast<std::size_t>(wide.size())));
      convert(wide.data(), x.data(), wide.size(), s_);
      return;
    }
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

}  // namespace chunk_detail

std::unique_ptr<Chunk> make_cuda_chunk(const ChunkConfig& config, DeviceContext& context) {
  return std::make_unique<chunk_detail::CudaChunk>(config, context);
}

}  // namespace meshwork::exec::cuda
