#include "exec/gpt.hpp"

#include "exec/gpt_detail.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "kernels/context_parallel_attention.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/multi_head_attention.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/swiglu.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"

namespace meshwork::exec {

using namespace detail;  // the helpers the layer and MoE files share (gpt_detail.hpp)
using models::OpPhase;

GptChunk::GptChunk(const plan::ModelConfig& m, std::int64_t first_layer, std::int64_t layers, bool embedding, bool head, std::uint64_t seed,
                   TensorParallel tp, Group* ep, Group* cp, bool cp_load_balance)
    : m_(m), first_layer_(first_layer), layers_(layers), embedding_(embedding), head_(head),
      rope_(m.position_embedding_type == plan::PositionEmbedding::rope), tp_(tp),
      own_ep_(ep == nullptr ? std::make_unique<LocalGroup>("ep") : nullptr), ep_(ep == nullptr ? own_ep_.get() : ep),
      own_cp_(cp == nullptr ? std::make_unique<LocalGroup>("cp") : nullptr), cp_(cp == nullptr ? own_cp_.get() : cp) {
  if (m.is_moe() && m.moe.num_moe_experts % ep_->size() != 0) throw std::invalid_argument("expert parallelism does not divide the experts");
  for (int member = 0; member < cp_->size() && cp_->size() > 1; ++member) {
    cp_positions_.push_back(kernels::context_parallel_positions(m.seq_length, cp_->size(), member, cp_load_balance));
  }
  std::vector<ParamSpec> specs;
  if (embedding_) specs = embedding_specs(m);
  for (std::int64_t l = first_layer; l < first_layer + layers; ++l) {
    auto s = layer_specs(m, l);
    specs.insert(specs.end(), s.begin(), s.end());
  }
  if (head_) {
    auto s = head_specs(m);
    specs.insert(specs.end(), s.begin(), s.end());
    // Tied output layer on a chunk without the embedding: its own copy of the word embedding.
    if (!m.untie_embeddings_and_output_weights && !embedding_) specs.push_back(embedding_specs(m).front());
  }
  for (auto& s : specs) {
    if (s.is_expert() && expert_owner(s.expert, m.moe.num_moe_experts, ep_->size()) != ep_->rank()) continue;  // another EP rank's
    Param prm;
    prm.value = shard(initial_value(s, seed), s.split, tp_.group->rank(), tp_.group->size());
    prm.grad = Mat::Zero(prm.value.rows(), prm.value.cols());
    prm.spec = std::move(s);
    index_[prm.spec.name] = params_.size();
    params_.push_back(std::move(prm));
  }
}

GptChunk::~GptChunk() = default;

Param* GptChunk::find(const std::string& name) {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &params_[it->second];
}
Param& GptChunk::p(const std::string& name) {
  Param* prm = find(name);
  if (prm == nullptr) throw std::logic_error("no parameter " + name);
  return *prm;
}
Param& GptChunk::p(std::int64_t layer, const char* name) { return p("layers." + std::to_string(layer) + "." + name); }

Index GptChunk::local_rows(Index tokens) const { return tp_.sequence_parallel ? tokens / tp_.group->size() : tokens; }

GptChunk::Cache& GptChunk::cache(int mb) {
  const auto it = caches_.find(mb);
  if (it == caches_.end()) throw std::logic_error("micro-batch " + std::to_string(mb) + " has no forward on this chunk");
  return *it->second;
}
GptChunk::LayerCache& GptChunk::layer_cache(Cache& c, std::int64_t layer) {
  if (layer < first_layer_ || layer >= first_layer_ + layers_) throw std::logic_error("layer " + std::to_string(layer) + " is not on this chunk");
  return c.layers[static_cast<std::size_t>(layer - first_layer_)];
}

void GptChunk::begin_forward(int mb, const Batch& batch, Mat x, double loss_scale) {
  auto c = std::make_unique<Cache>();
  c->layers.resize(static_cast<std::size_t>(layers_));
  c->batch = batch;
  if (c->batch.positions.empty()) {  // a whole sequence per sample
    c->batch.positions.resize(static_cast<std::size_t>(batch.seq));
    std::iota(c->batch.positions.begin(), c->batch.positions.end(), Index{0});
  }
  c->loss_scale = loss_scale;
  c->cur = std::move(x);
  caches_[mb] = std::move(c);
}
void GptChunk::begin_backward(int mb, Mat dy) {
  Cache& c = cache(mb);
  c.cur = std::move(dy);
  c.res = Mat();
}
Mat& GptChunk::flowing_mat(int mb) { return cache(mb).cur; }
void GptChunk::end_backward(int mb) { caches_.erase(mb); }
std::span<float> GptChunk::receive(int mb, Index rows, Index cols) {
  Mat& x = cache(mb).cur;
  x.resize(rows, cols);
  return {x.data(), static_cast<std::size_t>(x.size())};
}
std::span<const float> GptChunk::flowing(int mb) {
  const Mat& x = cache(mb).cur;
  return {x.data(), static_cast<std::size_t>(x.size())};
}

std::vector<ParamSlot> GptChunk::slots() {
  std::vector<ParamSlot> out;
  out.reserve(params_.size());
  for (auto& prm : params_) {
    // The gradient keeps the shard's shape while a ZeRO-3 value is released.
    out.push_back({&prm.spec, prm.grad.rows(), prm.grad.cols(), {prm.value.data(), static_cast<std::size_t>(prm.value.size())},
                   {prm.grad.data(), static_cast<std::size_t>(prm.grad.size())}});
  }
  return out;
}
void GptChunk::release_values() {
  for (auto& prm : params_) {
    if (!prm.spec.is_expert()) prm.value = Mat();  // experts are never sharded
  }
}
void GptChunk::allocate_values() {
  for (auto& prm : params_) prm.value.resize(prm.grad.rows(), prm.grad.cols());
}
void GptChunk::zero_grads() {
  for (auto& prm : params_) prm.grad.setZero();
}

void GptChunk::tp_collective(models::Collective coll, OpPhase phase, int mb) {
  Cache& c = cache(mb);
  Mat& x = phase == OpPhase::recompute ? c.rcur : c.cur;
  Group& g = *tp_.group;
  switch (coll) {
    case models::Collective::all_gather: {
      Mat out(x.rows() * g.size(), x.cols());
      g.all_gather(std::span<const float>(x.data(), static_cast<std::size_t>(x.size())), std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
      x = std::move(out);
      return;
    }
    case models::Collective::reduce_scatter: {
      Mat out(x.rows() / g.size(), x.cols());
      g.reduce_scatter_sum(std::span<const float>(x.data(), static_cast<std::size_t>(x.size())), std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
      x = std::move(out);
      return;
    }
    case models::Collective::all_reduce: g.all_reduce_sum(std::span<float>(x.data(), static_cast<std::size_t>(x.size()))); return;
    default: throw std::logic_error("a TP instruction the executor does not know: " + std::string(models::to_string(coll)));
  }
}

namespace {

std::span<const float> span_of(const Mat& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }
std::span<float> span_of(Mat& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }

}  // namespace

void GptChunk::cp_collective(std::string_view what, OpPhase phase, std::int64_t layer, int mb) {
  (void)phase;  // the forward, its recomputation and the backward exchange the same blocks
  LayerCache& lc = layer_cache(cache(mb), layer);
  Group& g = *cp_;
  const int t = tp_.group->size();
  const Index hd = m_.kv_channels, heads = m_.num_attention_heads / t, groups = m_.num_query_groups / t;
  if (what == "cp_ring_exchange") {
    // Every member's K and V blocks: the ring's cp - 1 passes, here as one all-gather of the
    // same bytes. Ring attention keeps only its own between uses, so the backward passes them
    // again (models/layer_comm prices both).
    auto exchange = [&](const Mat& mine, std::vector<Mat>& blocks) {
      Mat all(mine.rows() * g.size(), mine.cols());
      g.all_gather(span_of(mine), span_of(all));
      blocks.clear();
      for (int m = 0; m < g.size(); ++m) blocks.push_back(expand_groups(Mat(all.middleRows(m * mine.rows(), mine.rows())), heads, groups, hd));
    };
    exchange(lc.kg, lc.kb);
    exchange(lc.vg, lc.vb);
  } else if (what == "cp_grad_ring_exchange") {
    // Each block's K and V gradients back to its owner, summed over the members that used it.
    auto reduce = [&](Mat& blocks, Mat& mine) {
      mine.resize(blocks.rows() / g.size(), blocks.cols());
      g.reduce_scatter_sum(span_of(std::as_const(blocks)), span_of(mine));
      blocks = Mat();
    };
    reduce(lc.dk_blocks, lc.dk);
    reduce(lc.dv_blocks, lc.dv);
  } else {
    throw std::logic_error("a CP instruction the executor does not know: " + std::string(what));
  }
}

GptChunk::RingBlocks GptChunk::take_ring_blocks(LayerCache& lc) {
  const int n = cp_->size(), r = cp_->rank();
  if (static_cast<int>(lc.kb.size()) != n) throw std::logic_error("CP attention before its K and V exchange");
  RingBlocks b;
  for (int i = 0; i < n; ++i) {  // the ring's order: own block first, then the one from r - 1, ...
    b.owner.push_back(static_cast<std::size_t>((r - i + n) % n));
    b.k.push_back(std::move(lc.kb[b.owner.back()]));
    b.v.push_back(std::move(lc.vb[b.owner.back()]));
    b.positions.push_back(cp_positions_[b.owner.back()]);
  }
  lc.kb.clear();  // ring attention keeps only its own block between uses
  lc.vb.clear();
  return b;
}

kernels::MultiHeadAttentionForward<float> GptChunk::cp_attention_forward(const Cache& c, LayerCache& lc, Index heads) {
  const RingBlocks b = take_ring_blocks(lc);
  return kernels::blockwise_causal_attention_forward<float>(lc.q, c.batch.positions, b.k, b.v, b.positions, heads);
}

void GptChunk::cp_attention_backward(const Cache& c, LayerCache& lc, const Mat& dout, Index heads, Index groups) {
  const int n = cp_->size();
  const Index hd = m_.kv_channels;
  const RingBlocks b = take_ring_blocks(lc);
  const auto& owner = b.owner;
  const auto& positions = b.positions;
  auto g = kernels::blockwise_causal_attention_backward<float>(dout, lc.q, c.batch.positions, b.k, b.v, positions, lc.att, lc.lse, heads);
  lc.dq = std::move(g.dq);
  if (rope_) kernels::rope_apply<float>(lc.dq, heads, hd, std::span<const Index>(c.batch.positions), true);
  const Index rows = lc.kg.rows();
  lc.dk_blocks.resize(rows * n, groups * hd);
  lc.dv_blocks.resize(rows * n, groups * hd);
  for (std::size_t i = 0; i < owner.size(); ++i) {
    // Each block's K gradient back through its owner's rotation (linear, so before the sum).
    Mat dk = collapse_groups(g.dk[i], heads, groups, hd);
    if (rope_) kernels::rope_apply<float>(dk, groups, hd, std::span<const Index>(positions[i]), true);
    lc.dk_blocks.middleRows(static_cast<Index>(owner[i]) * rows, rows) = dk;
    lc.dv_blocks.middleRows(static_cast<Index>(owner[i]) * rows, rows) = collapse_groups(g.dv[i], heads, groups, hd);
  }
}

void GptChunk::run(std::string_view op, OpPhase phase, std::int64_t layer, int mb) {
  Cache& c = cache(mb);
  if (layer < 0) run_end_op(op, phase, c);
  else run_layer_op(op, phase, layer, c);
}

// The embeddings, the final norm, the LM head and the loss. Learned positions are added by TP
// rank 0 before the vocabulary-parallel embedding's reduction (the Program's next instruction),
// so that the sum holds them once on every row.
void GptChunk::run_end_op(std::string_view op, OpPhase phase, Cache& c) {
  const int t = tp_.group->size(), r = tp_.group->rank();
  const Index vocab_local = m_.vocab_size / t;
  const std::int64_t vocab_begin = r * vocab_local;
  const bool ln = m_.normalization == plan::Normalization::layernorm;
  const bool tied = !m_.untie_embeddings_and_output_weights;
  if (op == "embedding" && phase == OpPhase::forward) {
    c.cur = kernels::vocab_parallel_embedding_forward<float>(p("embedding.word").value, c.batch.ids, vocab_begin);
    if (r == 0 && !rope_) add_positions(c.cur, p("embedding.position").value, c.batch.positions);
  } else if (op == "embedding" && phase == OpPhase::backward_weight) {
    // The gradient of every row (gathered over the sequence with SP): the word embedding's
    // rows of this rank's vocabulary; the positions' on TP rank 0 with SP (the TP group sums
    // sequence-partial gradients), on every rank without (each holds all rows).
    if (!rope_ && (!tp_.sequence_parallel || r == 0)) accumulate_position_grad(p("embedding.position").grad, c.cur, c.batch.positions);
    kernels::vocab_parallel_embedding_accumulate_grad<float>(p("embedding.word").grad, c.cur, c.batch.ids, vocab_begin);
    c.cur = Mat();
  } else if (op == "final_norm" && phase == OpPhase::forward) {
    c.head_x = c.cur;
    if (ln) {
      auto f = kernels::layernorm_forward<float>(c.cur, vec(p("final_norm.gamma").value), vec(p("final_norm.beta").value), kNormEps);
      c.nf = {std::move(f.y), std::move(f.mean), std::move(f.rstd)};
    } else {
      auto f = kernels::rmsnorm_forward<float>(c.cur, vec(p("final_norm.gamma").value), kNormEps);
      c.nf = {std::move(f.y), Vec(), std::move(f.rstd)};
    }
    c.cur = c.nf.y;
  } else if (op == "final_norm" && phase == OpPhase::backward_input) {
    Param& gamma = p("final_norm.gamma");
    if (ln) {
      auto g = kernels::layernorm_backward<float>(c.cur, c.head_x, vec(gamma.value), c.nf.mean, c.nf.rstd);
      gamma.grad += g.dgamma;
      p("final_norm.beta").grad += g.dbeta;
      c.cur = std::move(g.dx);
    } else {
      auto g = kernels::rmsnorm_backward<float>(c.cur, c.head_x, vec(gamma.value), c.nf.rstd);
      gamma.grad += g.dgamma;
      c.cur = std::move(g.dx);
    }
  } else if (op == "lm_head" && phase == OpPhase::forward) {
    c.head_y = c.cur;
    c.logits = tied ? Mat(c.head_y * p("embedding.word").value.transpose()) : Mat(c.head_y * p("head.weight").value);
    c.cur = Mat();
  } else if (op == "lm_head" && phase == OpPhase::backward_input) {
    c.cur = tied ? Mat(c.dlogits * p("embedding.word").value) : Mat(c.dlogits * p("head.weight").value.transpose());
  } else if (op == "lm_head" && phase == OpPhase::backward_weight) {
    if (tied) p("embedding.word").grad.noalias() += c.dlogits.transpose() * c.head_y;
    else p("head.weight").grad.noalias() += c.head_y.transpose() * c.dlogits;
  } else if (op == "loss" && phase == OpPhase::forward) {
    // Vocabulary-parallel cross-entropy (Shoeybi et al. 2019 §3): the row maxima and the two
    // partial sums all-reduced over TP, never the logits. The three all-reduces of a float per
    // token run inside this instruction, as Megatron's _VocabParallelCrossEntropy issues them
    // inside one autograd function; the Program does not list them (3 x 4 bytes a token, under
    // a thousandth of a layer's TP traffic).
    Vec max = kernels::vocab_parallel_local_max<float>(c.logits);
    tp_.group->all_reduce_max(std::span<float>(max.data(), static_cast<std::size_t>(max.size())));
    auto sums = kernels::vocab_parallel_partial_sums<float>(c.logits, max, c.batch.targets, vocab_begin);
    tp_.group->all_reduce_sum(std::span<float>(sums.sum_exp.data(), static_cast<std::size_t>(sums.sum_exp.size())));
    tp_.group->all_reduce_sum(std::span<float>(sums.target_logit_minus_max.data(), static_cast<std::size_t>(sums.target_logit_minus_max.size())));
    auto ce = kernels::vocab_parallel_loss_and_grad<float>(c.logits, max, sums, c.batch.targets, vocab_begin);
    loss_sum_ += static_cast<double>(ce.mean_loss);
    ce.dlogits *= static_cast<float>(c.loss_scale);
    c.dlogits = std::move(ce.dlogits);
    c.logits = Mat();
  } else if (op == "loss" && phase == OpPhase::backward_input) {
    // The logits' gradient came with the loss (the fused kernel's output).
  } else {
    throw std::logic_error("the executor has no op '" + std::string(op) + "' in phase " + std::string(models::to_string(phase)) + " outside the layers");
  }
}

void GptChunk::run_layer_op(std::string_view op, OpPhase phase, std::int64_t l, Cache& c) {
  LayerCache& lc = layer_cache(c, l);
  const bool ln = m_.normalization == plan::Normalization::layernorm;
  const bool bias = m_.add_bias_linear;
  const int t = tp_.group->size();
  const Index hd = m_.kv_channels, heads = m_.num_attention_heads / t, groups = m_.num_query_groups / t;
  const bool recompute = phase == OpPhase::recompute;
  const bool forward = phase == OpPhase::forward || recompute;
  Mat& cur = recompute ? c.rcur : c.cur;
  Mat& res = recompute ? c.rres : c.res;
  const std::string prefix = "layers." + std::to_string(l) + ".";
  auto w = [&](const char* name) -> Param& { return p(prefix + name); };
  auto has = [&](const char* name) { return find(prefix + name) != nullptr; };
  auto norm = [&](const Mat& in, const char* name) {
    const std::string n(name);
    NormOut o;
    if (ln) {
      auto f = kernels::layernorm_forward<float>(in, vec(w((n + ".gamma").c_str()).value), vec(w((n + ".beta").c_str()).value), kNormEps);
      o = {std::move(f.y), std::move(f.mean), std::move(f.rstd)};
    } else {
      auto f = kernels::rmsnorm_forward<float>(in, vec(w((n + ".gamma").c_str()).value), kNormEps);
      o = {std::move(f.y), Vec(), std::move(f.rstd)};
    }
    return o;
  };
  auto norm_back = [&](const Mat& d, const Mat& x, const NormOut& o, const char* name) {
    const std::string n(name);
    Param& gamma = w((n + ".gamma").c_str());
    if (ln) {
      auto g = kernels::layernorm_backward<float>(d, x, vec(gamma.value), o.mean, o.rstd);
      gamma.grad += g.dgamma;
      w((n + ".beta").c_str()).grad += g.dbeta;
      return Mat(std::move(g.dx));
    }
    auto g = kernels::rmsnorm_backward<float>(d, x, vec(gamma.value), o.rstd);
    gamma.grad += g.dgamma;
    return Mat(std::move(g.dx));
  };
  auto linear = [&](const Mat& in, const char* name) {
    Mat out = in * w((std::string(name) + ".weight").c_str()).value;
    if (bias && has((std::string(name) + ".bias").c_str())) add_rows(out, w((std::string(name) + ".bias").c_str()).value);
    return out;
  };
  auto bias_grad = [&](const Mat& d, const char* name) {
    if (bias && has((std::string(name) + ".bias").c_str())) w((std::string(name) + ".bias").c_str()).grad += column_sums(d);
  };
  auto weight_grad = [&](const Mat& in, const Mat& d, const char* name) { w((std::string(name) + ".weight").c_str()).grad.noalias() += in.transpose() * d; };
  const bool moe = is_moe_layer(m_, l);
  if (moe && (op.starts_with("router") || op.starts_with("moe_") || op.starts_with("expert_") || op == "mlp_residual")) {
    run_moe_op(op, phase, l, c, lc);
    return;
  }

  if (forward) {
    if (op == "input_norm") {
      // A recomputation starts again from the layer's input, kept from its forward.
      if (!recompute) lc.x = cur;
      res = lc.x;
      lc.n1 = norm(lc.x, "ln1");
      cur = lc.n1.y;
    } else if (op == "qkv") {
      lc.y1 = cur;
      lc.q = linear(lc.y1, "q");
      Mat k = linear(lc.y1, "k"), v = linear(lc.y1, "v");
      if (rope_) {
        // RoPE on this rank's query heads and key groups, by each row's global position.
        kernels::rope_apply<float>(lc.q, heads, hd, std::span<const Index>(c.batch.positions));
        kernels::rope_apply<float>(k, groups, hd, std::span<const Index>(c.batch.positions));
      }
      if (cp_->size() > 1) {
        // What the CP ring passes: K and V per group (the next instruction exchanges them).
        lc.kg = std::move(k);
        lc.vg = std::move(v);
      } else {
        lc.k = expand_groups(k, heads, groups, hd);
        lc.v = expand_groups(v, heads, groups, hd);
      }
    } else if (op == "attention") {
      auto att = cp_->size() > 1 ? cp_attention_forward(c, lc, heads)
                                 : kernels::multi_head_causal_attention_forward<float>(lc.q, lc.k, lc.v, heads, c.batch.seq);
      lc.att = std::move(att.out);
      lc.lse = std::move(att.logsumexp);
    } else if (op == "attention_out") {
      cur = lc.att * w("o.weight").value;
    } else if (op == "attention_residual") {
      if (bias) add_rows(cur, w("o.bias").value);
      cur = res + cur;
      lc.x1 = cur;
    } else if (op == "mlp_norm") {
      res = cur;
      lc.n2 = norm(cur, "ln2");
      cur = lc.n2.y;
    } else if (op == "mlp_fc1") {
      lc.y2 = cur;
      lc.u = lc.y2 * w("fc1.weight").value;
    } else if (op == "mlp_act") {
      if (m_.activation == plan::Activation::swiglu) {
        if (bias) add_rows(lc.u, w("fc1.bias").value);
        lc.a = kernels::swiglu_forward<float>(lc.u);
      } else {
        lc.a = kernels::bias_gelu_forward<float>(lc.u, bias ? vec(w("fc1.bias").value) : Vec::Zero(lc.u.cols()));
      }
    } else if (op == "mlp_fc2") {
      cur = lc.a * w("fc2.weight").value;
    } else if (op == "mlp_residual") {
      if (bias) add_rows(cur, w("fc2.bias").value);
      cur = res + cur;
    } else {
      throw std::logic_error("the executor has no layer op '" + std::string(op) + "' in phase " + std::string(models::to_string(phase)));
    }
    return;
  }

  if (phase == OpPhase::backward_input) {
    if (op == "mlp_residual") {
      res = cur;
      bias_grad(cur, "fc2");
    } else if (op == "mlp_fc2") {
      lc.dmf = cur;
      cur = lc.dmf * w("fc2.weight").value.transpose();
    } else if (op == "mlp_act") {
      if (m_.activation == plan::Activation::swiglu) {
        cur = kernels::swiglu_backward<float>(cur, lc.u);
      } else {
        auto g = kernels::bias_gelu_backward<float>(cur, lc.u, bias ? vec(w("fc1.bias").value) : Vec::Zero(lc.u.cols()));
        cur = std::move(g.dx);
      }
      bias_grad(cur, "fc1");
    } else if (op == "mlp_fc1") {
      lc.du = cur;
      cur = lc.du * w("fc1.weight").value.transpose();
    } else if (op == "mlp_norm") {
      cur = norm_back(cur, lc.x1, lc.n2, "ln2") + res;
    } else if (op == "attention_residual") {
      res = cur;
      bias_grad(cur, "o");
    } else if (op == "attention_out") {
      lc.dof = cur;
      cur = lc.dof * w("o.weight").value.transpose();
    } else if (op == "attention") {
      if (cp_->size() > 1) {
        cp_attention_backward(c, lc, cur, heads, groups);
      } else {
        auto ag = kernels::multi_head_causal_attention_backward<float>(cur, lc.q, lc.k, lc.v, lc.att, lc.lse, heads, c.batch.seq);
        lc.dq = std::move(ag.dq);
        lc.dk = collapse_groups(ag.dk, heads, groups, hd);
        lc.dv = collapse_groups(ag.dv, heads, groups, hd);
        if (rope_) {
          // Back through the rotation: its transpose, the opposite angle.
          kernels::rope_apply<float>(lc.dq, heads, hd, std::span<const Index>(c.batch.positions), true);
          kernels::rope_apply<float>(lc.dk, groups, hd, std::span<const Index>(c.batch.positions), true);
        }
      }
      cur = Mat();
    } else if (op == "qkv") {
      bias_grad(lc.dq, "q");
      bias_grad(lc.dk, "k");
      bias_grad(lc.dv, "v");
      cur = lc.dq * w("q.weight").value.transpose() + lc.dk * w("k.weight").value.transpose() + lc.dv * w("v.weight").value.transpose();
    } else if (op == "input_norm") {
      cur = norm_back(cur, lc.x, lc.n1, "ln1") + res;
    } else {
      throw std::logic_error("the executor has no layer op '" + std::string(op) + "' in phase backward_input");
    }
    return;
  }

  // Weight gradients, from what the input-gradient halves kept.
  if (op == "mlp_fc2") {
    weight_grad(lc.a, lc.dmf, "fc2");
    lc.dmf = Mat();
  } else if (op == "mlp_fc1") {
    weight_grad(lc.y2, lc.du, "fc1");
    lc.du = Mat();
  } else if (op == "attention_out") {
    weight_grad(lc.att, lc.dof, "o");
    lc.dof = Mat();
  } else if (op == "qkv") {
    weight_grad(lc.y1, lc.dq, "q");
    weight_grad(lc.y1, lc.dk, "k");
    weight_grad(lc.y1, lc.dv, "v");
    lc.dq = lc.dk = lc.dv = Mat();
  } else {
    throw std::logic_error("the executor has no layer op '" + std::string(op) + "' in phase backward_weight");
  }
}

namespace {

// The ops of the op table, as forward() and backward() play them on one rank.
std::vector<models::Op> table_ops(const plan::ModelConfig& m, bool moe) {
  plan::Plan p;
  p.model = m;
  return models::layer_ops(p, moe, false);
}
// Without the micro-batch's load (OpKind::data): the batch is the caller's, already at hand.
std::vector<models::Op> end_ops(const plan::ModelConfig& m, bool first) {
  plan::Plan p;
  p.model = m;
  std::vector<models::Op> ops = first ? models::first_stage_ops(p) : models::last_stage_ops(p);
  std::erase_if(ops, [](const models::Op& op) { return op.kind == models::OpKind::data; });
  return ops;
}

}  // namespace

Mat GptChunk::forward(int mb, const Batch& batch, Mat x, double loss_scale) {
  if (tp_.group->size() != 1 || ep_->size() != 1 || cp_->size() != 1) throw std::logic_error("GptChunk::forward runs one rank; the Trainer plays a mesh's Program");
  begin_forward(mb, batch, std::move(x), loss_scale);
  auto pass = [&](const std::vector<models::Op>& ops, std::int64_t layer) {
    for (const auto& op : ops) {
      if (op.phase == OpPhase::forward) run(op.name, OpPhase::forward, layer, mb);
    }
  };
  if (embedding_) pass(end_ops(m_, true), -1);
  for (std::int64_t l = first_layer_; l < first_layer_ + layers_; ++l) pass(table_ops(m_, is_moe_layer(m_, l)), l);
  if (head_) pass(end_ops(m_, false), -1);
  return flowing_mat(mb);
}

Mat GptChunk::backward(int mb, Mat dy) {
  if (tp_.group->size() != 1 || ep_->size() != 1 || cp_->size() != 1) throw std::logic_error("GptChunk::backward runs one rank; the Trainer plays a mesh's Program");
  begin_backward(mb, std::move(dy));
  // Each op's input gradient, then its weight gradient, in reverse (the Program's order).
  auto pass = [&](const std::vector<models::Op>& ops, std::int64_t layer) {
    for (const models::Op* op : models::backward_order(ops, true)) run(op->name, op->phase, layer, mb);
  };
  if (head_) pass(end_ops(m_, false), -1);
  for (std::int64_t l = first_layer_ + layers_ - 1; l >= first_layer_; --l) pass(table_ops(m_, is_moe_layer(m_, l)), l);
  if (embedding_) pass(end_ops(m_, true), -1);
  Mat out = std::move(flowing_mat(mb));
  end_backward(mb);
  return out;
}

}  // namespace meshwork::exec
