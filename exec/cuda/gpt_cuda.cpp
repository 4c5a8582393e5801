#include "exec/cuda/gpt_cuda.hpp"

#include <cuda_bf16.h>

#include <cstddef>
#include <numeric>
#include <stdexcept>

#include "exec/cuda/gemm.hpp"
#include "exec/cuda/gpt_kernels.hpp"
#include "exec/cuda/materialised_attention.hpp"
#include "exec/cuda/nvtx.hpp"
#include "exec/cuda/streams.hpp"
#include "exec/gpt_detail.hpp"
#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/cross_entropy.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/flash_attention.hpp"
#include "kernels/cuda/gelu.hpp"
#include "kernels/cuda/layernorm.hpp"
#include "kernels/cuda/rmsnorm.hpp"
#include "kernels/cuda/swiglu.hpp"

namespace meshwork::exec::cuda {

namespace {

using kernels::cuda::DeviceBuffer;
using I = std::int64_t;

// Parameters start on 128-element boundaries of the flat buffers: 256 bytes in bf16, the
// alignment cuBLASLt's heuristics assume by default (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*).
constexpr I kParamAlignElements = 128;

// What `automatic` leaves free after the materialised path's P tensors: cuBLASLt's workspace
// per stream (kGemmWorkspaceBytes), the kernels' stream-ordered temporaries and the CUDA
// context's own growth. A margin, not a measured figure.
constexpr std::size_t kAutomaticReserveBytes = std::size_t{2} << 30;

struct Entry {
  ParamSpec spec;
  I offset = 0, count = 0;
};

template <class T>
DeviceBuffer<T> buffer(I count) {
  return DeviceBuffer<T>(static_cast<std::size_t>(count));
}

}  // namespace

struct CudaGpt::Impl {
  plan::ModelConfig m;
  kernels::AdamWHyperparams hp;
  AttentionPath requested;     // the constructor's choice
  AttentionPath path;          // what runs: materialised or flash_direct once allocate() has run
  bool ln, swiglu, bias, tied;
  bool rope;  // rotary positions on q and k (Su et al. 2021) in place of a learned table
  DeviceBuffer<double2> rope_table;  // with rope: the angles of positions [0, seq) (gpt_rope_table)
  I H, heads, groups, hd, q_cols, kv_cols, ffn, ffn_in, vocab, seq;

  std::vector<ParamSpec> specs;
  std::map<std::string, Entry, std::less<>> entries;
  I total = 0;
  DeviceBuffer<float> master, grads, exp_avg, exp_avg_sq;
  DeviceBuffer<bf16> copy;  // what the forward and backward read

  Streams streams;
  cudaStream_t s = nullptr;
  Gemm gemm;
  EventTimer timer;

  // Activations kept from forward to backward, per layer, for `tokens` rows.
  struct Layer {
    DeviceBuffer<bf16> x, y1, q, k, v, qh, kh, vh, atth, att, x1, y2, u, a;
    DeviceBuffer<float> mean1, rstd1, mean2, rstd2, lse;
    DeviceBuffer<bf16> probs;  // materialised path: P [samples * heads, seq, seq]
  };
  std::vector<Layer> layers;
  I tokens = 0, samples = 0;
  DeviceBuffer<std::int64_t> ids, targets;
  DeviceBuffer<bf16> final_x, head_y, logits, proj, grad_a, grad_b, dx1, da, du, dy2, dnorm, datt, dattH, dqh, dkh, dvh, dq, dk, dv, dy1;
  DeviceBuffer<float> mean_f, rstd_f, loss_rows, lse_f, dy1_f32, tmp_gamma, tmp_beta, tmp_bias;
  DeviceBuffer<bf16> dprobs;  // materialised path: backward's dP, then dS, one layer at a time

  Impl(const plan::ModelConfig& model, std::uint64_t seed, const kernels::AdamWHyperparams& h, bool timing, AttentionPath attention)
      : m(model), hp(h), requested(attention), path(attention), timer(timing) {
    if (m.is_moe()) throw std::invalid_argument("CudaGpt: MoE layers are not supported");
    if (m.num_query_groups <= 0 || m.num_attention_heads % m.num_query_groups != 0) {
      throw std::invalid_argument("CudaGpt: " + std::to_string(m.num_attention_heads) + " heads do not divide into " + std::to_string(m.num_query_groups) + " query groups");
    }
    ln = m.normalization == plan::Normalization::layernorm;
    swiglu = m.activation == plan::Activation::swiglu;
    bias = m.add_bias_linear;
    tied = !m.untie_embeddings_and_output_weights;
    rope = m.position_embedding_type == plan::PositionEmbedding::rope;
    H = m.hidden_size;
    heads = m.num_attention_heads;
    groups = m.num_query_groups;
    hd = m.kv_channels;
    q_cols = heads * hd;
    kv_cols = groups * hd;
    ffn = m.ffn_hidden_size;
    ffn_in = ffn * (swiglu ? 2 : 1);
    vocab = m.vocab_size;
    seq = m.seq_length;
    s = streams.compute.get();

    // GptChunk's order for a chunk holding everything: embeddings, layers, head.
    specs = embedding_specs(m);
    for (I l = 0; l < m.num_layers; ++l) {
      auto ls = layer_specs(m, l);
      specs.insert(specs.end(), ls.begin(), ls.end());
    }
    auto hs = head_specs(m);
    specs.insert(specs.end(), hs.begin(), hs.end());
    for (const auto& spec : specs) {
      Entry e{spec, total, spec.rows * spec.cols};
      total += (e.count + kParamAlignElements - 1) / kParamAlignElements * kParamAlignElements;
      entries.emplace(spec.name, std::move(e));
    }
    master = buffer<float>(total);
    grads = buffer<float>(total);
    exp_avg = buffer<float>(total);
    exp_avg_sq = buffer<float>(total);
    copy = buffer<bf16>(total);
    // On the compute stream, which does not wait for the legacy default stream that
    // DeviceBuffer::zero uses. The padding stays 0 through AdamW (zero gradient, zero decay).
    for (auto* b : {&master, &grads, &exp_avg, &exp_avg_sq}) MESHWORK_CUDA_CHECK(cudaMemsetAsync(b->data(), 0, b->size_bytes(), s));
    for (const auto& spec : specs) {
      const Mat v = initial_value(spec, seed);
      set(entry(spec.name), std::span<const float>(v.data(), static_cast<std::size_t>(v.size())));
    }
    tmp_gamma = buffer<float>(H);
    tmp_beta = buffer<float>(H);
    tmp_bias = buffer<float>(ffn_in);
    if (rope) {
      rope_table = buffer<double2>(seq * (hd / 2));
      gpt_rope_table(rope_table.data(), seq, hd, s);
    }
  }

  const Entry& entry(std::string_view name) const {
    const auto it = entries.find(name);
    if (it == entries.end()) throw std::invalid_argument("CudaGpt: no parameter " + std::string(name));
    return it->second;
  }
  bf16* W(std::string_view name) { return copy.data() + entry(name).offset; }
  float* G(std::string_view name) { return grads.data() + entry(name).offset; }
  bool has(std::string_view name) const { return entries.find(name) != entries.end(); }
  static std::string lp(I l, const char* name) { return "layers." + std::to_string(l) + "." + name; }

  void set(const Entry& e, std::span<const float> value) {
    if (static_cast<I>(value.size()) != e.count) {
      throw std::invalid_argument("CudaGpt: " + e.spec.name + " takes " + std::to_string(e.count) + " values, not " + std::to_string(value.size()));
    }
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(master.data() + e.offset, value.data(), value.size_bytes(), cudaMemcpyHostToDevice, s));
    convert(master.data() + e.offset, copy.data() + e.offset, e.count, s);
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s));  // `value` may go once this returns
  }
  std::vector<float> get(const float* base, std::string_view name) {
    const Entry& e = entry(name);
    std::vector<float> host(static_cast<std::size_t>(e.count));
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(host.data(), base + e.offset, host.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s));
    return host;
  }

  EventTimer::Scope op(models::OpKind c) { return timer.scope(models::to_string(c), s); }

  // Buffers for micro-batches of `n` tokens (reallocated when the size changes).
  void allocate(I n) {
    if (n == tokens) return;
    tokens = 0;  // set once every buffer is in place: a failed allocation is retried next time
    const I bh = samples * heads;
    layers.clear();
    dprobs = DeviceBuffer<bf16>();
    layers.resize(static_cast<std::size_t>(m.num_layers));
    for (auto& L : layers) {
      L.x = buffer<bf16>(n * H);
      L.y1 = buffer<bf16>(n * H);
      L.q = buffer<bf16>(n * q_cols);
      L.k = buffer<bf16>(n * kv_cols);
      L.v = buffer<bf16>(n * kv_cols);
      L.qh = buffer<bf16>(n * q_cols);
      L.kh = buffer<bf16>(n * q_cols);
      L.vh = buffer<bf16>(n * q_cols);
      L.atth = buffer<bf16>(n * q_cols);
      L.att = buffer<bf16>(n * q_cols);
      L.x1 = buffer<bf16>(n * H);
      L.y2 = buffer<bf16>(n * H);
      L.u = buffer<bf16>(n * ffn_in);
      L.a = buffer<bf16>(n * ffn);
      L.mean1 = buffer<float>(n);
      L.rstd1 = buffer<float>(n);
      L.mean2 = buffer<float>(n);
      L.rstd2 = buffer<float>(n);
      L.lse = buffer<float>(bh * seq);
    }
    ids = buffer<std::int64_t>(n);
    targets = buffer<std::int64_t>(n);
    for (auto* b : {&final_x, &head_y, &proj, &grad_a, &grad_b, &dx1, &dy2, &dnorm, &dy1}) *b = buffer<bf16>(n * H);
    logits = buffer<bf16>(n * vocab);
    da = buffer<bf16>(n * ffn);
    du = buffer<bf16>(n * ffn_in);
    for (auto* b : {&datt, &dattH, &dqh, &dkh, &dvh, &dq}) *b = buffer<bf16>(n * q_cols);
    dk = buffer<bf16>(n * kv_cols);
    dv = buffer<bf16>(n * kv_cols);
    mean_f = buffer<float>(n);
    rstd_f = buffer<float>(n);
    loss_rows = buffer<float>(n);
    lse_f = buffer<float>(n);
    dy1_f32 = buffer<float>(n * H);
    allocate_attention(bh);
    tokens = n;
  }

  // Chooses the attention path for `bh` (sequence, head) pairs and, for the materialised one,
  // allocates P per layer and backward's scratch, after every other buffer so that the free
  // memory it sees is what is left.
  void allocate_attention(I bh) {
    const std::size_t per_tensor = materialised_attention_probs_bytes(bh, seq);
    const std::size_t needed = per_tensor * static_cast<std::size_t>(m.num_layers + 1);
    std::size_t free_bytes = 0, total_bytes = 0;
    MESHWORK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    path = requested;
    if (requested == AttentionPath::automatic) {
      const bool fits = needed + kAutomaticReserveBytes <= free_bytes;
      path = seq >= kMaterialisedMinSeq && fits ? AttentionPath::materialised : AttentionPath::flash_direct;
    }
    if (path != AttentionPath::materialised) return;
    if (needed > free_bytes) {
      throw std::runtime_error("CudaGpt: the materialised attention path needs " + std::to_string(needed >> 20) + " MiB (" +
                               std::to_string(m.num_layers + 1) + " x [" + std::to_string(bh) + ", " + std::to_string(seq) + ", " + std::to_string(seq) +
                               "] bf16) and the device has " + std::to_string(free_bytes >> 20) + " MiB free");
    }
    const I count = bh * seq * seq;
    for (auto& L : layers) L.probs = buffer<bf16>(count);
    dprobs = buffer<bf16>(count);
  }

  // out [tokens, cols] = in [tokens, rows] * W [rows, cols] (+ bias).
  void linear(const bf16* in, std::string_view name_prefix, bf16* y, I rows_in, I cols_out) {
    const std::string p(name_prefix);
    {
      auto t = op(models::OpKind::gemm);
      gemm.matmul(in, W(p + ".weight"), y, tokens, cols_out, rows_in, false, false, 1.0F, 0.0F, s);
    }
    if (bias && has(p + ".bias")) {
      auto t = op(models::OpKind::elementwise);
      add_bias(y, W(p + ".bias"), tokens, cols_out, s);
    }
  }
  // dW [rows_in, cols_out] += in^T d (fp32), and the bias's column sums.
  void weight_grad(const bf16* in, const bf16* d, const std::string& p, I rows_in, I cols_out) {
    {
      auto t = op(models::OpKind::gemm);
      gemm.matmul(in, d, G(p + ".weight"), rows_in, cols_out, tokens, true, false, 1.0F, 1.0F, s);
    }
    if (bias && has(p + ".bias")) {
      auto t = op(models::OpKind::elementwise);
      accumulate_column_sums(d, G(p + ".bias"), tokens, cols_out, s);
    }
  }

  void norm_forward(const bf16* x, const std::string& p, bf16* y, float* mean, float* rstd) {
    auto t = op(models::OpKind::norm);
    if (ln) {
      kernels::cuda::layernorm_forward<bf16>(x, W(p + ".gamma"), W(p + ".beta"), y, mean, rstd, tokens, H, detail::kNormEps, s);
    } else {
      kernels::cuda::rmsnorm_forward<bf16>(x, W(p + ".gamma"), y, rstd, tokens, H, detail::kNormEps, s);
    }
  }
  void norm_backward(const bf16* dy, const bf16* x, const std::string& p, const float* mean, const float* rstd, bf16* dx) {
    auto t = op(models::OpKind::norm);
    if (ln) {
      kernels::cuda::layernorm_backward<bf16>(dy, x, W(p + ".gamma"), mean, rstd, dx, tmp_gamma.data(), tmp_beta.data(), tokens, H, s);
      accumulate(tmp_beta.data(), G(p + ".beta"), H, s);
    } else {
      kernels::cuda::rmsnorm_backward<bf16>(dy, x, W(p + ".gamma"), rstd, dx, tmp_gamma.data(), tokens, H, s);
    }
    accumulate(tmp_gamma.data(), G(p + ".gamma"), H, s);
  }

  void layer_forward(I l, Layer& L, bf16* y) {
    const I bh = samples * heads;
    norm_forward(L.x.data(), lp(l, "ln1"), L.y1.data(), L.mean1.data(), L.rstd1.data());
    linear(L.y1.data(), lp(l, "q"), L.q.data(), H, q_cols);
    linear(L.y1.data(), lp(l, "k"), L.k.data(), H, kv_cols);
    linear(L.y1.data(), lp(l, "v"), L.v.data(), H, kv_cols);
    {
      auto t = op(models::OpKind::attention);
      if (rope) {  // timed with the attention, as the backward's inverse rotation is
        gpt_rope(L.q.data(), rope_table.data(), tokens, heads, hd, seq, false, s);
        gpt_rope(L.k.data(), rope_table.data(), tokens, groups, hd, seq, false, s);
      }
      rows_to_heads(L.q.data(), L.qh.data(), samples, seq, heads, heads, hd, s);
      rows_to_heads(L.k.data(), L.kh.data(), samples, seq, heads, groups, hd, s);
      rows_to_heads(L.v.data(), L.vh.data(), samples, seq, heads, groups, hd, s);
      if (path == AttentionPath::materialised) {
        materialised_attention_forward(gemm, L.qh.data(), L.kh.data(), L.vh.data(), L.probs.data(), L.atth.data(), bh, seq, hd, s,
                                       causal_row_blocks(seq));
      } else if (hd <= kernels::cuda::kFlashMaxHeadDim) {
        kernels::cuda::flash_attention_forward<bf16>(L.qh.data(), L.kh.data(), L.vh.data(), L.atth.data(), L.lse.data(), bh, seq, hd, s);
      } else {
        kernels::cuda::causal_attention_forward<bf16>(L.qh.data(), L.kh.data(), L.vh.data(), L.atth.data(), L.lse.data(), bh, seq, hd, s);
      }
      heads_to_rows(L.atth.data(), L.att.data(), samples, seq, heads, heads, hd, s);
    }
    linear(L.att.data(), lp(l, "o"), proj.data(), q_cols, H);
    {
      auto t = op(models::OpKind::elementwise);
      add(L.x.data(), proj.data(), L.x1.data(), tokens * H, s);  // the residual
    }
    norm_forward(L.x1.data(), lp(l, "ln2"), L.y2.data(), L.mean2.data(), L.rstd2.data());
    {
      auto t = op(models::OpKind::gemm);
      gemm.matmul(L.y2.data(), W(lp(l, "fc1.weight")), L.u.data(), tokens, ffn_in, H, false, false, 1.0F, 0.0F, s);
    }
    {
      auto t = op(models::OpKind::elementwise);
      if (swiglu) {
        // As the CPU: the bias joins u before SwiGLU, and backward differentiates at u + bias.
        if (bias) add_bias(L.u.data(), W(lp(l, "fc1.bias")), tokens, ffn_in, s);
        kernels::cuda::swiglu_forward<bf16>(L.u.data(), L.a.data(), tokens, ffn, s);
      } else {
        kernels::cuda::bias_gelu_forward<bf16>(L.u.data(), bias ? W(lp(l, "fc1.bias")) : nullptr, L.a.data(), tokens, ffn, s);
      }
    }
    linear(L.a.data(), lp(l, "fc2"), proj.data(), ffn, H);
    auto t = op(models::OpKind::elementwise);
    add(L.x1.data(), proj.data(), y, tokens * H, s);
  }

  // dx from dy (both [tokens, H]); accumulates the layer's parameter gradients.
  void layer_backward(I l, Layer& L, const bf16* dy, bf16* dx) {
    const I bh = samples * heads;
    // MLP.
    weight_grad(L.a.data(), dy, lp(l, "fc2"), ffn, H);
    {
      auto t = op(models::OpKind::gemm);
      gemm.matmul(dy, W(lp(l, "fc2.weight")), da.data(), tokens, ffn, H, false, true, 1.0F, 0.0F, s);
    }
    {
      auto t = op(models::OpKind::elementwise);
      if (swiglu) {
        kernels::cuda::swiglu_backward<bf16>(da.data(), L.u.data(), du.data(), tokens, ffn, s);
        if (bias) accumulate_column_sums(du.data(), G(lp(l, "fc1.bias")), tokens, ffn_in, s);
      } else {
        kernels::cuda::bias_gelu_backward<bf16>(da.data(), L.u.data(), bias ? W(lp(l, "fc1.bias")) : nullptr, du.data(), bias ? tmp_bias.data() : nullptr, tokens,
                                                ffn, s);
        if (bias) accumulate(tmp_bias.data(), G(lp(l, "fc1.bias")), ffn, s);
      }
    }
    {
      auto t = op(models::OpKind::gemm);
      gemm.matmul(L.y2.data(), du.data(), G(lp(l, "fc1.weight")), H, ffn_in, tokens, true, false, 1.0F, 1.0F, s);
      gemm.matmul(du.data(), W(lp(l, "fc1.weight")), dy2.data(), tokens, H, ffn_in, false, true, 1.0F, 0.0F, s);
    }
    norm_backward(dy2.data(), L.x1.data(), lp(l, "ln2"), L.mean2.data(), L.rstd2.data(), dnorm.data());
    {
      auto t = op(models::OpKind::elementwise);
      add(dy, dnorm.data(), dx1.data(), tokens * H, s);
    }
    // Attention.
    weight_grad(L.att.data(), dx1.data(), lp(l, "o"), q_cols, H);
    {
      auto t = op(models::OpKind::gemm);
      gemm.matmul(dx1.data(), W(lp(l, "o.weight")), datt.data(), tokens, q_cols, H, false, true, 1.0F, 0.0F, s);
    }
    {
      auto t = op(models::OpKind::attention);
      rows_to_heads(datt.data(), dattH.data(), samples, seq, heads, heads, hd, s);
      if (path == AttentionPath::materialised) {
        materialised_attention_backward(gemm, dattH.data(), L.qh.data(), L.kh.data(), L.vh.data(), L.probs.data(), dprobs.data(), dqh.data(), dkh.data(),
                                        dvh.data(), bh, seq, hd, s, causal_row_blocks(seq));
      } else {
        kernels::cuda::causal_attention_backward<bf16>(dattH.data(), L.qh.data(), L.kh.data(), L.vh.data(), L.atth.data(), L.lse.data(), dqh.data(),
                                                       dkh.data(), dvh.data(), bh, seq, hd, s);
      }
      heads_to_rows(dqh.data(), dq.data(), samples, seq, heads, heads, hd, s);
      heads_to_rows(dkh.data(), dk.data(), samples, seq, heads, groups, hd, s);  // GQA: a group's heads summed
      heads_to_rows(dvh.data(), dv.data(), samples, seq, heads, groups, hd, s);
      if (rope) {  // back through the rotation: the opposite angle
        gpt_rope(dq.data(), rope_table.data(), tokens, heads, hd, seq, true, s);
        gpt_rope(dk.data(), rope_table.data(), tokens, groups, hd, seq, true, s);
      }
    }
    weight_grad(L.y1.data(), dq.data(), lp(l, "q"), H, q_cols);
    weight_grad(L.y1.data(), dk.data(), lp(l, "k"), H, kv_cols);
    weight_grad(L.y1.data(), dv.data(), lp(l, "v"), H, kv_cols);
    {
      // dy1 = dq Wq^T + dk Wk^T + dv Wv^T, summed in fp32 and rounded once.
      auto t = op(models::OpKind::gemm);
      gemm.matmul(dq.data(), W(lp(l, "q.weight")), dy1_f32.data(), tokens, H, q_cols, false, true, 1.0F, 0.0F, s);
      gemm.matmul(dk.data(), W(lp(l, "k.weight")), dy1_f32.data(), tokens, H, kv_cols, false, true, 1.0F, 1.0F, s);
      gemm.matmul(dv.data(), W(lp(l, "v.weight")), dy1_f32.data(), tokens, H, kv_cols, false, true, 1.0F, 1.0F, s);
    }
    {
      auto t = op(models::OpKind::elementwise);
      convert(dy1_f32.data(), dy1.data(), tokens * H, s);
    }
    norm_backward(dy1.data(), L.x.data(), lp(l, "ln1"), L.mean1.data(), L.rstd1.data(), dnorm.data());
    auto t = op(models::OpKind::elementwise);
    add(dx1.data(), dnorm.data(), dx, tokens * H, s);
  }

  double forward_backward(const Batch& batch, double loss_scale) {
    if (batch.seq != seq) throw std::invalid_argument("CudaGpt: micro-batches of sequences of " + std::to_string(batch.seq) + ", the model's are " + std::to_string(seq));
    const I n = batch.samples * batch.seq;
    if (n <= 0 || static_cast<I>(batch.ids.size()) != n || static_cast<I>(batch.targets.size()) != n) {
      throw std::invalid_argument("CudaGpt: a micro-batch needs samples * seq ids and targets");
    }
    for (std::size_t i = 0; i < batch.ids.size(); ++i) {
      if (batch.ids[i] < 0 || batch.ids[i] >= vocab || batch.targets[i] < 0 || batch.targets[i] >= vocab) {
        throw std::invalid_argument("CudaGpt: token " + std::to_string(i) + " is outside the vocabulary of " + std::to_string(vocab));
      }
    }
    if (batch.samples != samples) tokens = 0;  // head-major buffers depend on the samples too
    samples = batch.samples;
    allocate(n);
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(ids.data(), batch.ids.data(), static_cast<std::size_t>(n) * sizeof(std::int64_t), cudaMemcpyHostToDevice, s));
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(targets.data(), batch.targets.data(), static_cast<std::size_t>(n) * sizeof(std::int64_t), cudaMemcpyHostToDevice, s));
    const I L_count = m.num_layers;
    {
      NvtxRange range("forward");
      {
        auto t = op(models::OpKind::embedding);
        bf16* x0 = L_count > 0 ? layers[0].x.data() : final_x.data();
        embedding_forward(ids.data(), W("embedding.word"), rope ? nullptr : W("embedding.position"), x0, n, seq, H, s);
      }
      for (I l = 0; l < L_count; ++l) {
        bf16* y = l + 1 < L_count ? layers[static_cast<std::size_t>(l + 1)].x.data() : final_x.data();
        layer_forward(l, layers[static_cast<std::size_t>(l)], y);
      }
      norm_forward(final_x.data(), "final_norm", head_y.data(), mean_f.data(), rstd_f.data());
      {
        auto t = op(models::OpKind::gemm);
        if (tied) {
          gemm.matmul(head_y.data(), W("embedding.word"), logits.data(), n, vocab, H, false, true, 1.0F, 0.0F, s);
        } else {
          gemm.matmul(head_y.data(), W("head.weight"), logits.data(), n, vocab, H, false, false, 1.0F, 0.0F, s);
        }
      }
      auto t = op(models::OpKind::loss);
      kernels::cuda::cross_entropy_forward<bf16>(logits.data(), targets.data(), loss_rows.data(), lse_f.data(), n, vocab, s);
      // d(loss_scale * mean loss)/d(logits), in place of the logits.
      kernels::cuda::cross_entropy_backward<bf16>(logits.data(), targets.data(), lse_f.data(), logits.data(), n, vocab,
                                                  static_cast<float>(loss_scale / static_cast<double>(n)), s);
    }
    {
      NvtxRange range("backward");
      bf16* dy = grad_a.data();
      bf16* dx = grad_b.data();
      {
        auto t = op(models::OpKind::gemm);
        const bf16* dlogits = logits.data();
        if (tied) {
          gemm.matmul(dlogits, head_y.data(), G("embedding.word"), vocab, H, n, true, false, 1.0F, 1.0F, s);
          gemm.matmul(dlogits, W("embedding.word"), proj.data(), n, H, vocab, false, false, 1.0F, 0.0F, s);
        } else {
          gemm.matmul(head_y.data(), dlogits, G("head.weight"), H, vocab, n, true, false, 1.0F, 1.0F, s);
          gemm.matmul(dlogits, W("head.weight"), proj.data(), n, H, vocab, false, true, 1.0F, 0.0F, s);
        }
      }
      norm_backward(proj.data(), final_x.data(), "final_norm", mean_f.data(), rstd_f.data(), dy);
      for (I l = L_count - 1; l >= 0; --l) {
        layer_backward(l, layers[static_cast<std::size_t>(l)], dy, dx);
        std::swap(dy, dx);
      }
      {
        auto t = op(models::OpKind::embedding);
        if (!rope) embedding_backward_position(dy, G("embedding.position"), samples, seq, H, s);
        embedding_backward_word(ids.data(), dy, G("embedding.word"), n, H, s);
      }
    }
    std::vector<float> losses(static_cast<std::size_t>(n));
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(losses.data(), loss_rows.data(), losses.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s));
    timer.collect();  // free after the synchronisation, and keeps the timer's event pool small
    return std::accumulate(losses.begin(), losses.end(), 0.0) / static_cast<double>(n);
  }

  void optimizer_step(I step) {
    NvtxRange range("optimizer");
    {
      auto t = op(models::OpKind::optimizer);
      kernels::cuda::adamw_step<float>(master.data(), grads.data(), exp_avg.data(), exp_avg_sq.data(), copy.data(), total, step, hp, s);
    }
    zero_grads();
  }

  void zero_grads() { MESHWORK_CUDA_CHECK(cudaMemsetAsync(grads.data(), 0, grads.size_bytes(), s)); }
};

const char* attention_path_name(AttentionPath p) {
  switch (p) {
    case AttentionPath::automatic: return "automatic";
    case AttentionPath::materialised: return "materialised";
    case AttentionPath::flash_direct: return "flash_direct";
  }
  throw std::invalid_argument("attention_path_name: unknown AttentionPath");
}

AttentionPath parse_attention_path(std::string_view name) {
  for (const AttentionPath p : {AttentionPath::automatic, AttentionPath::materialised, AttentionPath::flash_direct}) {
    if (name == attention_path_name(p)) return p;
  }
  throw std::invalid_argument("attention path '" + std::string(name) + "' is not one of automatic, materialised, flash_direct");
}

CudaGpt::CudaGpt(const plan::ModelConfig& m, std::uint64_t seed, const kernels::AdamWHyperparams& hp, bool timing, AttentionPath attention)
    : impl_(std::make_unique<Impl>(m, seed, hp, timing, attention)) {}
CudaGpt::~CudaGpt() = default;

const std::vector<ParamSpec>& CudaGpt::specs() const { return impl_->specs; }
void CudaGpt::set_param(const std::string& name, std::span<const float> value) { impl_->set(impl_->entry(name), value); }
std::vector<float> CudaGpt::param(const std::string& name) const { return impl_->get(impl_->master.data(), name); }
std::vector<float> CudaGpt::grad(const std::string& name) const { return impl_->get(impl_->grads.data(), name); }
double CudaGpt::forward_backward(const Batch& batch, double loss_scale) { return impl_->forward_backward(batch, loss_scale); }
void CudaGpt::optimizer_step(std::int64_t step) { impl_->optimizer_step(step); }
void CudaGpt::zero_grads() { impl_->zero_grads(); }
AttentionPath CudaGpt::attention_path() const { return impl_->path; }
float* CudaGpt::grad_data() { return impl_->grads.data(); }
std::int64_t CudaGpt::flat_size() const { return impl_->total; }
cudaStream_t CudaGpt::compute_stream() const { return impl_->s; }

std::map<std::string, double, std::less<>> CudaGpt::op_ms() {
  impl_->timer.collect();
  return impl_->timer.totals_ms();
}

}  // namespace meshwork::exec::cuda
