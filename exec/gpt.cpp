#include "exec/gpt.hpp"

#include "exec/gpt_detail.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <stdexcept>

#include "kernels/embedding.hpp"
#include "kernels/gelu.hpp"
#include "kernels/layernorm.hpp"
#include "kernels/multi_head_attention.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/swiglu.hpp"
#include "kernels/vocab_parallel_cross_entropy.hpp"

namespace meshwork::exec {

using namespace detail;  // the helpers the layer and MoE files share (gpt_detail.hpp)

struct GptChunk::LayerCache {
  Mat x, x1;      // the layer's input and the residual after attention (this rank's rows)
  NormOut n1, n2;
  Mat y1, y2;     // normalised inputs of the column-parallel layers (all rows)
  Mat q, k, v;    // this rank's heads, K and V repeated per query head
  Mat att, lse;
  Mat u;          // MLP pre-activation
  Mat a;          // MLP activation
  std::unique_ptr<MoeCache> moe;  // an MoE layer's, in place of u and a
};

struct GptChunk::Cache {
  std::vector<LayerCache> layers;
  std::vector<std::int64_t> ids;
  Mat head_x, head_y, dlogits;
  NormOut nf;
};

GptChunk::GptChunk(const plan::ModelConfig& m, std::int64_t first_layer, std::int64_t layers, bool embedding, bool head, std::uint64_t seed,
                   TensorParallel tp, OpSeconds* timing, Group* ep)
    : m_(m), first_layer_(first_layer), layers_(layers), embedding_(embedding), head_(head), tp_(tp), timing_(timing),
      own_ep_(ep == nullptr ? std::make_unique<LocalGroup>("ep") : nullptr), ep_(ep == nullptr ? own_ep_.get() : ep) {
  if (m.is_moe() && m.moe.num_moe_experts % ep_->size() != 0) throw std::invalid_argument("expert parallelism does not divide the experts");
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

Mat GptChunk::enter(const Mat& x) {
  if (!tp_.sequence_parallel || tp_.group->size() == 1) return x;
  Mat out(x.rows() * tp_.group->size(), x.cols());
  tp_.group->all_gather(std::span<const float>(x.data(), static_cast<std::size_t>(x.size())), std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
  return out;
}
Mat GptChunk::enter_back(const Mat& d) { return leave(d); }
Mat GptChunk::leave(const Mat& partial) {
  if (tp_.group->size() == 1) return partial;
  if (!tp_.sequence_parallel) {
    Mat out = partial;
    tp_.group->all_reduce_sum(std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
    return out;
  }
  Mat out(partial.rows() / tp_.group->size(), partial.cols());
  tp_.group->reduce_scatter_sum(std::span<const float>(partial.data(), static_cast<std::size_t>(partial.size())),
                                std::span<float>(out.data(), static_cast<std::size_t>(out.size())));
  return out;
}
Mat GptChunk::leave_back(const Mat& d) { return enter(d); }

Mat GptChunk::layer_forward(std::int64_t l, const Mat& x, LayerCache& c) {
  const bool ln = m_.normalization == plan::Normalization::layernorm;
  const bool bias = m_.add_bias_linear;
  const int t = tp_.group->size();
  const Index hd = m_.kv_channels, heads = m_.num_attention_heads / t, groups = m_.num_query_groups / t;
  auto norm = [&](const Mat& in, const char* name) {
    Scope s(timing_, OpClass::norm);
    const std::string n(name);
    NormOut o;
    if (ln) {
      auto f = kernels::layernorm_forward<float>(in, vec(p(l, (n + ".gamma").c_str()).value), vec(p(l, (n + ".beta").c_str()).value), kNormEps);
      o = {std::move(f.y), std::move(f.mean), std::move(f.rstd)};
    } else {
      auto f = kernels::rmsnorm_forward<float>(in, vec(p(l, (n + ".gamma").c_str()).value), kNormEps);
      o = {std::move(f.y), Vec(), std::move(f.rstd)};
    }
    return o;
  };
  auto linear = [&](const Mat& in, const char* name) {
    Mat out;
    {
      Scope s(timing_, OpClass::gemm);
      out = in * p(l, (std::string(name) + ".weight").c_str()).value;
    }
    if (bias && find("layers." + std::to_string(l) + "." + name + ".bias")) {
      Scope s(timing_, OpClass::elementwise);
      add_rows(out, p(l, (std::string(name) + ".bias").c_str()).value);
    }
    return out;
  };
  c.x = x;
  c.n1 = norm(x, "ln1");
  c.y1 = enter(c.n1.y);
  c.q = linear(c.y1, "q");
  c.k = expand_groups(linear(c.y1, "k"), heads, groups, hd);
  c.v = expand_groups(linear(c.y1, "v"), heads, groups, hd);
  {
    Scope s(timing_, OpClass::attention);
    auto att = kernels::multi_head_causal_attention_forward<float>(c.q, c.k, c.v, heads, m_.seq_length);
    c.att = std::move(att.out);
    c.lse = std::move(att.logsumexp);
  }
  Mat o;
  {
    Scope s(timing_, OpClass::gemm);
    o = c.att * p(l, "o.weight").value;
  }
  o = leave(o);
  {
    Scope s(timing_, OpClass::elementwise);
    if (bias) add_rows(o, p(l, "o.bias").value);
    c.x1 = x + o;  // the residual
  }
  c.n2 = norm(c.x1, "ln2");
  c.y2 = enter(c.n2.y);
  if (is_moe_layer(m_, l)) {
    // TP is 1 with MoE (execute() refuses more), so the layer needs no leave().
    c.moe = std::make_unique<MoeCache>();
    Mat moe = moe_forward(l, c.y2, *c.moe);
    Scope s(timing_, OpClass::elementwise);
    return c.x1 + moe;
  }
  {
    Scope s(timing_, OpClass::gemm);
    c.u = c.y2 * p(l, "fc1.weight").value;
  }
  {
    Scope s(timing_, OpClass::elementwise);
    if (m_.activation == plan::Activation::swiglu) {
      if (bias) add_rows(c.u, p(l, "fc1.bias").value);
      c.a = kernels::swiglu_forward<float>(c.u);
    } else {
      c.a = kernels::bias_gelu_forward<float>(c.u, bias ? vec(p(l, "fc1.bias").value) : Vec::Zero(c.u.cols()));
    }
  }
  Mat mlp;
  {
    Scope s(timing_, OpClass::gemm);
    mlp = c.a * p(l, "fc2.weight").value;
  }
  mlp = leave(mlp);
  Scope s(timing_, OpClass::elementwise);
  if (bias) add_rows(mlp, p(l, "fc2.bias").value);
  return c.x1 + mlp;
}

Mat GptChunk::layer_backward(std::int64_t l, const Mat& dy, const LayerCache& c) {
  const bool ln = m_.normalization == plan::Normalization::layernorm;
  const bool bias = m_.add_bias_linear;
  const int t = tp_.group->size();
  const Index hd = m_.kv_channels, heads = m_.num_attention_heads / t, groups = m_.num_query_groups / t;
  auto norm_back = [&](const Mat& d, const Mat& x, const NormOut& o, const char* name) {
    Scope s(timing_, OpClass::norm);
    const std::string n(name);
    Param& gamma = p(l, (n + ".gamma").c_str());
    if (ln) {
      auto g = kernels::layernorm_backward<float>(d, x, vec(gamma.value), o.mean, o.rstd);
      gamma.grad += g.dgamma;
      p(l, (n + ".beta").c_str()).grad += g.dbeta;
      return Mat(std::move(g.dx));
    }
    auto g = kernels::rmsnorm_backward<float>(d, x, vec(gamma.value), o.rstd);
    gamma.grad += g.dgamma;
    return Mat(std::move(g.dx));
  };
  auto weight_grad = [&](const Mat& in, const Mat& d, const char* name) {
    Scope s(timing_, OpClass::gemm);
    p(l, (std::string(name) + ".weight").c_str()).grad.noalias() += in.transpose() * d;
  };
  auto bias_grad = [&](const Mat& d, const char* name) {
    if (!bias) return;
    Scope s(timing_, OpClass::elementwise);
    p(l, (std::string(name) + ".bias").c_str()).grad += column_sums(d);
  };
  // MLP.
  Mat dx1 = dy;
  if (c.moe) {
    dx1 += norm_back(enter_back(moe_backward(l, dy, c.y2, *c.moe)), c.x1, c.n2, "ln2");
  } else {
    bias_grad(dy, "fc2");
    const Mat dmf = leave_back(dy);
    weight_grad(c.a, dmf, "fc2");
    Mat da;
    {
      Scope s(timing_, OpClass::gemm);
      da = dmf * p(l, "fc2.weight").value.transpose();
    }
    Mat du;
    {
      Scope s(timing_, OpClass::elementwise);
      if (m_.activation == plan::Activation::swiglu) {
        du = kernels::swiglu_backward<float>(da, c.u);
      } else {
        auto g = kernels::bias_gelu_backward<float>(da, c.u, bias ? vec(p(l, "fc1.bias").value) : Vec::Zero(c.u.cols()));
        du = std::move(g.dx);
      }
    }
    bias_grad(du, "fc1");
    weight_grad(c.y2, du, "fc1");
    Mat dy2;
    {
      Scope s(timing_, OpClass::gemm);
      dy2 = du * p(l, "fc1.weight").value.transpose();
    }
    dx1 += norm_back(enter_back(dy2), c.x1, c.n2, "ln2");
  }
  // Attention.
  bias_grad(dx1, "o");
  const Mat dof = leave_back(dx1);
  weight_grad(c.att, dof, "o");
  Mat datt;
  {
    Scope s(timing_, OpClass::gemm);
    datt = dof * p(l, "o.weight").value.transpose();
  }
  kernels::AttentionGrads<float> ag;
  {
    Scope s(timing_, OpClass::attention);
    ag = kernels::multi_head_causal_attention_backward<float>(datt, c.q, c.k, c.v, c.att, c.lse, heads, m_.seq_length);
  }
  const Mat dk = collapse_groups(ag.dk, heads, groups, hd), dv = collapse_groups(ag.dv, heads, groups, hd);
  bias_grad(ag.dq, "q");
  bias_grad(dk, "k");
  bias_grad(dv, "v");
  weight_grad(c.y1, ag.dq, "q");
  weight_grad(c.y1, dk, "k");
  weight_grad(c.y1, dv, "v");
  Mat dy1;
  {
    Scope s(timing_, OpClass::gemm);
    dy1 = ag.dq * p(l, "q.weight").value.transpose() + dk * p(l, "k.weight").value.transpose() + dv * p(l, "v.weight").value.transpose();
  }
  return dx1 + norm_back(enter_back(dy1), c.x, c.n1, "ln1");
}

// Mixture of experts (Shazeer et al. 2017, "Outrageously Large Neural Networks", §2; top-k
// routing as Switch, Fedus et al. 2021, generalised to k): logits = y W_r, p = softmax(logits)
// per token, the k largest p chosen (ties to the lower expert index), and the output the sum
// over chosen experts of p_e * expert_e(y). The chosen probabilities are not renormalised over
// the k, as Switch's gate (Fedus et al. 2021 §2.1) keeps its one; Megatron-core's default and
// Mixtral take a softmax over the k chosen logits instead (a renormalisation), a difference in
// the model, not in the parallelism that --verify checks. No capacity limit, so no token is
// dropped (dropless, Gale et al. 2023), and no auxiliary load-balancing loss: the gradient is
// exactly that of the loss above. Expert parallelism (Lepikhin et al.
// 2021, GShard §2.2): each token's row goes to the EP rank that owns its expert by an
// all-to-all, comes back by the reverse one.
Mat GptChunk::forward(int mb, const Batch& batch, Mat x, double loss_scale) {
  auto cache = std::make_unique<Cache>();
  const int t = tp_.group->size(), r = tp_.group->rank();
  const Index vocab_local = m_.vocab_size / t;
  const std::int64_t vocab_begin = r * vocab_local;
  if (embedding_) {
    cache->ids = batch.ids;
    Mat e;
    {
      Scope s(timing_, OpClass::embedding);
      e = kernels::vocab_parallel_embedding_forward<float>(p("embedding.word").value, batch.ids, vocab_begin);
    }
    x = leave(e);
    Scope s(timing_, OpClass::embedding);
    const Index offset = tp_.sequence_parallel ? r * x.rows() : 0;
    const Mat& pos = p("embedding.position").value;
    add_positions(x, pos, offset, batch.seq);
  }
  cache->layers.resize(static_cast<std::size_t>(layers_));
  for (std::int64_t i = 0; i < layers_; ++i) x = layer_forward(first_layer_ + i, x, cache->layers[static_cast<std::size_t>(i)]);
  if (head_) {
    const bool ln = m_.normalization == plan::Normalization::layernorm;
    cache->head_x = x;
    {
      Scope s(timing_, OpClass::norm);
      if (ln) {
        auto f = kernels::layernorm_forward<float>(x, vec(p("final_norm.gamma").value), vec(p("final_norm.beta").value), kNormEps);
        cache->nf = {std::move(f.y), std::move(f.mean), std::move(f.rstd)};
      } else {
        auto f = kernels::rmsnorm_forward<float>(x, vec(p("final_norm.gamma").value), kNormEps);
        cache->nf = {std::move(f.y), Vec(), std::move(f.rstd)};
      }
    }
    cache->head_y = enter(cache->nf.y);
    Mat logits;
    {
      Scope s(timing_, OpClass::gemm);
      logits = m_.untie_embeddings_and_output_weights ? Mat(cache->head_y * p("head.weight").value)
                                                      : Mat(cache->head_y * p("embedding.word").value.transpose());
    }
    // Vocabulary-parallel cross-entropy (Shoeybi et al. 2019 §3): the row maxima and the two
    // partial sums all-reduced over TP, never the logits.
    // Every pass over the logits is the loss's time (`meshwork calibrate` times the same
    // three kernels); the all-reduces between them are TP communication.
    Vec max;
    {
      Scope s(timing_, OpClass::loss);
      max = kernels::vocab_parallel_local_max<float>(logits);
    }
    tp_.group->all_reduce_max(std::span<float>(max.data(), static_cast<std::size_t>(max.size())));
    kernels::VocabParallelPartialSums<float> sums;
    {
      Scope s(timing_, OpClass::loss);
      sums = kernels::vocab_parallel_partial_sums<float>(logits, max, batch.targets, vocab_begin);
    }
    tp_.group->all_reduce_sum(std::span<float>(sums.sum_exp.data(), static_cast<std::size_t>(sums.sum_exp.size())));
    tp_.group->all_reduce_sum(std::span<float>(sums.target_logit_minus_max.data(), static_cast<std::size_t>(sums.target_logit_minus_max.size())));
    Scope s(timing_, OpClass::loss);
    auto ce = kernels::vocab_parallel_loss_and_grad<float>(logits, max, sums, batch.targets, vocab_begin);
    loss_sum_ += static_cast<double>(ce.mean_loss);
    ce.dlogits *= static_cast<float>(loss_scale);
    cache->dlogits = std::move(ce.dlogits);
    x = Mat();
  }
  caches_[mb] = std::move(cache);
  return x;
}

Mat GptChunk::backward(int mb, Mat dy) {
  const auto it = caches_.find(mb);
  if (it == caches_.end()) throw std::logic_error("backward of micro-batch " + std::to_string(mb) + " before its forward");
  Cache& c = *it->second;
  const int t = tp_.group->size(), r = tp_.group->rank();
  if (head_) {
    const bool tied = !m_.untie_embeddings_and_output_weights;
    Param& w = p(tied ? "embedding.word" : "head.weight");
    Mat dyf;
    {
      Scope s(timing_, OpClass::gemm);
      if (tied) {
        w.grad.noalias() += c.dlogits.transpose() * c.head_y;
        dyf = c.dlogits * w.value;
      } else {
        w.grad.noalias() += c.head_y.transpose() * c.dlogits;
        dyf = c.dlogits * w.value.transpose();
      }
    }
    const Mat d = enter_back(dyf);
    Scope s(timing_, OpClass::norm);
    Param& gamma = p("final_norm.gamma");
    if (m_.normalization == plan::Normalization::layernorm) {
      auto g = kernels::layernorm_backward<float>(d, c.head_x, vec(gamma.value), c.nf.mean, c.nf.rstd);
      gamma.grad += g.dgamma;
      p("final_norm.beta").grad += g.dbeta;
      dy = std::move(g.dx);
    } else {
      auto g = kernels::rmsnorm_backward<float>(d, c.head_x, vec(gamma.value), c.nf.rstd);
      gamma.grad += g.dgamma;
      dy = std::move(g.dx);
    }
  }
  for (std::int64_t i = layers_ - 1; i >= 0; --i) dy = layer_backward(first_layer_ + i, dy, c.layers[static_cast<std::size_t>(i)]);
  if (embedding_) {
    {
      Scope s(timing_, OpClass::embedding);
      Mat& pos = p("embedding.position").grad;
      const Index offset = tp_.sequence_parallel ? r * dy.rows() : 0;
      const Index seq = m_.seq_length;
      accumulate_position_grad(pos, dy, offset, seq);
    }
    const Mat df = leave_back(dy);
    Scope s(timing_, OpClass::embedding);
    kernels::vocab_parallel_embedding_accumulate_grad<float>(p("embedding.word").grad, df, c.ids, r * (m_.vocab_size / t));
    dy = Mat();
  }
  caches_.erase(it);
  return dy;
}

}  // namespace meshwork::exec
