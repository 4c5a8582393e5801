#include "exec/gpt.hpp"

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

namespace {

using Vec = kernels::Vec<float>;
// Megatron-LM's layernorm epsilon (--layernorm-epsilon, default 1e-5).
constexpr float kNormEps = 1e-5F;

Vec vec(const Mat& m) { return Eigen::Map<const Vec>(m.data(), m.size()); }
Mat column_sums(const Mat& d) { return d.colwise().sum().transpose(); }
void add_rows(Mat& x, const Mat& bias) { x.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias.data(), bias.size()); }

class Scope {
 public:
  Scope(OpSeconds* t, OpClass c) : t_(t), c_(c), start_(std::chrono::steady_clock::now()) {}
  ~Scope() {
    if (t_ != nullptr) (*t_)[c_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  OpSeconds* t_;
  OpClass c_;
  std::chrono::steady_clock::time_point start_;
};

struct NormOut {
  Mat y;
  Vec mean, rstd;
};
struct NormGrad {
  Mat dx, dgamma, dbeta;
};

// GQA (Ainslie et al. 2023): each K/V group serves heads/groups query heads; the attention
// kernel takes one K and V per query head, so groups are repeated, and their gradients summed.
Mat expand_groups(const Mat& kv, Index heads, Index groups, Index hd) {
  if (heads == groups) return kv;
  Mat out(kv.rows(), heads * hd);
  for (Index h = 0; h < heads; ++h) out.middleCols(h * hd, hd) = kv.middleCols(h / (heads / groups) * hd, hd);
  return out;
}
Mat collapse_groups(const Mat& d, Index heads, Index groups, Index hd) {
  if (heads == groups) return d;
  Mat out = Mat::Zero(d.rows(), groups * hd);
  for (Index h = 0; h < heads; ++h) out.middleCols(h / (heads / groups) * hd, hd) += d.middleCols(h * hd, hd);
  return out;
}

}  // namespace

// An MoE layer's dispatch, kept from forward to backward. Pairs are (token, choice), index
// token * topk + choice; the send buffer holds them sorted by expert (so by owning EP rank).
struct GptChunk::MoeCache {
  Mat probs;                         // [tokens, experts] the router's softmax
  std::vector<std::int64_t> expert;  // per pair: the chosen expert
  std::vector<float> gate;           // per pair: its probability, the output's weight
  std::vector<std::size_t> order;    // per send row: its pair
  std::vector<int> send_counts, recv_counts;  // floats per EP member
  std::vector<Index> segment;        // per (source member, local expert): first received row
  std::vector<std::int64_t> recv_rows;  // per (source member, local expert): rows received
  Mat out;                           // per pair: its expert's output
  std::vector<Mat> x, u, a;          // per local expert: input rows, pre-activation, activation
};

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
Mat GptChunk::moe_forward(std::int64_t l, const Mat& y, MoeCache& c) {
  const Index tokens = y.rows(), h = y.cols();
  const std::int64_t experts = m_.moe.num_moe_experts, k = m_.moe.moe_router_topk;
  const int ep = ep_->size();
  const std::int64_t local = experts / ep;
  Mat logits;
  {
    Scope s(timing_, OpClass::gemm);
    logits = y * p(l, "router.weight").value;
  }
  {
    Scope s(timing_, OpClass::elementwise);
    c.probs.resize(tokens, experts);
    for (Index t = 0; t < tokens; ++t) {
      const float max = logits.row(t).maxCoeff();
      c.probs.row(t) = (logits.row(t).array() - max).exp().matrix();
      c.probs.row(t) /= c.probs.row(t).sum();
    }
    c.expert.resize(static_cast<std::size_t>(tokens * k));
    c.gate.resize(c.expert.size());
    std::vector<std::int64_t> idx(static_cast<std::size_t>(experts));
    for (Index t = 0; t < tokens; ++t) {
      for (std::int64_t e = 0; e < experts; ++e) idx[static_cast<std::size_t>(e)] = e;
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](std::int64_t a, std::int64_t b) {
        const float pa = c.probs(t, a), pb = c.probs(t, b);
        return pa > pb || (pa == pb && a < b);
      });
      for (std::int64_t j = 0; j < k; ++j) {
        const auto q = static_cast<std::size_t>(t * k + j);
        c.expert[q] = idx[static_cast<std::size_t>(j)];
        c.gate[q] = c.probs(t, c.expert[q]);
      }
    }
  }
  // Pairs sorted by expert (a counting sort, stable: by token within an expert).
  std::vector<std::int64_t> rows_per_expert(static_cast<std::size_t>(experts), 0);
  for (const auto e : c.expert) ++rows_per_expert[static_cast<std::size_t>(e)];
  std::vector<std::size_t> next(static_cast<std::size_t>(experts), 0);
  for (std::size_t e = 1; e < next.size(); ++e) next[e] = next[e - 1] + static_cast<std::size_t>(rows_per_expert[e - 1]);
  c.order.resize(c.expert.size());
  for (std::size_t q = 0; q < c.expert.size(); ++q) c.order[next[static_cast<std::size_t>(c.expert[q])]++] = q;
  Mat send(static_cast<Index>(c.order.size()), h);
  for (std::size_t i = 0; i < c.order.size(); ++i) send.row(static_cast<Index>(i)) = y.row(static_cast<Index>(c.order[i] / static_cast<std::size_t>(k)));
  // Rows per (member, local expert) both ways, then the rows themselves.
  c.recv_rows.assign(static_cast<std::size_t>(experts), 0);
  ep_->all_to_all(rows_per_expert, c.recv_rows);
  c.send_counts.assign(static_cast<std::size_t>(ep), 0);
  c.recv_counts.assign(static_cast<std::size_t>(ep), 0);
  c.segment.assign(static_cast<std::size_t>(experts), 0);
  Index received = 0;
  for (int d = 0; d < ep; ++d) {
    std::int64_t out_rows = 0, in_rows = 0;
    for (std::int64_t le = 0; le < local; ++le) {
      const auto i = static_cast<std::size_t>(d * local + le);
      out_rows += rows_per_expert[i];
      c.segment[i] = received + in_rows;
      in_rows += c.recv_rows[i];
    }
    received += in_rows;
    if (std::max(out_rows, in_rows) * h > std::numeric_limits<int>::max()) throw std::length_error("MoE dispatch of more than 2^31 floats to one rank");
    c.send_counts[static_cast<std::size_t>(d)] = static_cast<int>(out_rows * h);
    c.recv_counts[static_cast<std::size_t>(d)] = static_cast<int>(in_rows * h);
  }
  Mat rows(received, h);
  ep_->all_to_all_v(std::span<const float>(send.data(), static_cast<std::size_t>(send.size())), c.send_counts,
                    std::span<float>(rows.data(), static_cast<std::size_t>(rows.size())), c.recv_counts);
  const Mat results = experts_forward(l, rows, c);
  Mat back(send.rows(), h);
  ep_->all_to_all_v(std::span<const float>(results.data(), static_cast<std::size_t>(results.size())), c.recv_counts,
                    std::span<float>(back.data(), static_cast<std::size_t>(back.size())), c.send_counts);
  Scope s(timing_, OpClass::elementwise);
  c.out.resize(back.rows(), h);
  for (std::size_t i = 0; i < c.order.size(); ++i) c.out.row(static_cast<Index>(c.order[i])) = back.row(static_cast<Index>(i));
  Mat out = Mat::Zero(tokens, h);
  for (std::size_t q = 0; q < c.gate.size(); ++q) out.row(static_cast<Index>(q / static_cast<std::size_t>(k))) += c.gate[q] * c.out.row(static_cast<Index>(q));
  return out;
}

Mat GptChunk::experts_forward(std::int64_t l, const Mat& rows, MoeCache& c) {
  const int ep = ep_->size();
  const std::int64_t local = m_.moe.num_moe_experts / ep, first = ep_->rank() * local;
  const bool swiglu = m_.activation == plan::Activation::swiglu;
  Mat results(rows.rows(), rows.cols());
  c.x.assign(static_cast<std::size_t>(local), Mat());
  c.u.assign(c.x.size(), Mat());
  c.a.assign(c.x.size(), Mat());
  for (std::int64_t le = 0; le < local; ++le) {
    const auto e = static_cast<std::size_t>(le);
    // This expert's rows from every member, in member order.
    Index n = 0;
    for (int src = 0; src < ep; ++src) n += c.recv_rows[static_cast<std::size_t>(src * local + le)];
    if (n == 0) continue;
    Mat& x = c.x[e];
    x.resize(n, rows.cols());
    Index at = 0;
    for (int src = 0; src < ep; ++src) {
      const auto i = static_cast<std::size_t>(src * local + le);
      x.middleRows(at, c.recv_rows[i]) = rows.middleRows(c.segment[i], c.recv_rows[i]);
      at += c.recv_rows[i];
    }
    const std::string name = "experts." + std::to_string(first + le) + ".";
    {
      Scope s(timing_, OpClass::gemm);
      c.u[e] = x * p(l, (name + "fc1.weight").c_str()).value;
    }
    {
      Scope s(timing_, OpClass::elementwise);
      c.a[e] = swiglu ? kernels::swiglu_forward<float>(c.u[e]) : kernels::bias_gelu_forward<float>(c.u[e], Vec::Zero(c.u[e].cols()));
    }
    Mat o;
    {
      Scope s(timing_, OpClass::gemm);
      o = c.a[e] * p(l, (name + "fc2.weight").c_str()).value;
    }
    at = 0;
    for (int src = 0; src < ep; ++src) {
      const auto i = static_cast<std::size_t>(src * local + le);
      results.middleRows(c.segment[i], c.recv_rows[i]) = o.middleRows(at, c.recv_rows[i]);
      at += c.recv_rows[i];
    }
  }
  return results;
}

Mat GptChunk::experts_backward(std::int64_t l, const Mat& drows, const MoeCache& c) {
  const int ep = ep_->size();
  const std::int64_t local = m_.moe.num_moe_experts / ep, first = ep_->rank() * local;
  const bool swiglu = m_.activation == plan::Activation::swiglu;
  Mat dx_rows(drows.rows(), drows.cols());
  for (std::int64_t le = 0; le < local; ++le) {
    const auto e = static_cast<std::size_t>(le);
    const Mat& x = c.x[e];
    if (x.rows() == 0) continue;
    Mat dout(x.rows(), x.cols());
    Index at = 0;
    for (int src = 0; src < ep; ++src) {
      const auto i = static_cast<std::size_t>(src * local + le);
      dout.middleRows(at, c.recv_rows[i]) = drows.middleRows(c.segment[i], c.recv_rows[i]);
      at += c.recv_rows[i];
    }
    const std::string name = "experts." + std::to_string(first + le) + ".";
    Param& fc1 = p(l, (name + "fc1.weight").c_str());
    Param& fc2 = p(l, (name + "fc2.weight").c_str());
    Mat da;
    {
      Scope s(timing_, OpClass::gemm);
      fc2.grad.noalias() += c.a[e].transpose() * dout;
      da = dout * fc2.value.transpose();
    }
    Mat du;
    {
      Scope s(timing_, OpClass::elementwise);
      du = swiglu ? kernels::swiglu_backward<float>(da, c.u[e]) : Mat(kernels::bias_gelu_backward<float>(da, c.u[e], Vec::Zero(c.u[e].cols())).dx);
    }
    Mat dx;
    {
      Scope s(timing_, OpClass::gemm);
      fc1.grad.noalias() += x.transpose() * du;
      dx = du * fc1.value.transpose();
    }
    at = 0;
    for (int src = 0; src < ep; ++src) {
      const auto i = static_cast<std::size_t>(src * local + le);
      dx_rows.middleRows(c.segment[i], c.recv_rows[i]) = dx.middleRows(at, c.recv_rows[i]);
      at += c.recv_rows[i];
    }
  }
  return dx_rows;
}

Mat GptChunk::moe_backward(std::int64_t l, const Mat& dy, const Mat& y, const MoeCache& c) {
  const Index tokens = y.rows(), h = y.cols();
  const auto k = static_cast<std::size_t>(m_.moe.moe_router_topk);
  // Each pair's expert output gets gate * dy; its gate gets dy . output.
  Mat dsend(static_cast<Index>(c.order.size()), h);
  Mat dprobs = Mat::Zero(tokens, c.probs.cols());
  {
    Scope s(timing_, OpClass::elementwise);
    for (std::size_t i = 0; i < c.order.size(); ++i) {
      const std::size_t q = c.order[i];
      dsend.row(static_cast<Index>(i)) = c.gate[q] * dy.row(static_cast<Index>(q / k));
    }
    for (std::size_t q = 0; q < c.gate.size(); ++q) dprobs(static_cast<Index>(q / k), c.expert[q]) += dy.row(static_cast<Index>(q / k)).dot(c.out.row(static_cast<Index>(q)));
  }
  Index received = 0;
  for (const auto n : c.recv_counts) received += n / h;
  Mat drows(received, h);
  ep_->all_to_all_v(std::span<const float>(dsend.data(), static_cast<std::size_t>(dsend.size())), c.send_counts,
                    std::span<float>(drows.data(), static_cast<std::size_t>(drows.size())), c.recv_counts);
  const Mat dx_rows = experts_backward(l, drows, c);
  Mat dback(dsend.rows(), h);
  ep_->all_to_all_v(std::span<const float>(dx_rows.data(), static_cast<std::size_t>(dx_rows.size())), c.recv_counts,
                    std::span<float>(dback.data(), static_cast<std::size_t>(dback.size())), c.send_counts);
  Mat dyin = Mat::Zero(tokens, h);
  Mat dlogits(tokens, c.probs.cols());
  {
    Scope s(timing_, OpClass::elementwise);
    for (std::size_t i = 0; i < c.order.size(); ++i) dyin.row(static_cast<Index>(c.order[i] / k)) += dback.row(static_cast<Index>(i));
    // Softmax backward: dlogits = p * (dp - sum(p * dp)) per row.
    for (Index t = 0; t < tokens; ++t) {
      const float dot = c.probs.row(t).dot(dprobs.row(t));
      dlogits.row(t) = (c.probs.row(t).array() * (dprobs.row(t).array() - dot)).matrix();
    }
  }
  Scope s(timing_, OpClass::gemm);
  Param& router = p(l, "router.weight");
  router.grad.noalias() += y.transpose() * dlogits;
  dyin.noalias() += dlogits * router.value.transpose();
  return dyin;
}

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
    for (Index i = 0; i < x.rows(); ++i) x.row(i) += pos.row((offset + i) % batch.seq);
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
    Vec max = kernels::vocab_parallel_local_max<float>(logits);
    tp_.group->all_reduce_max(std::span<float>(max.data(), static_cast<std::size_t>(max.size())));
    auto sums = kernels::vocab_parallel_partial_sums<float>(logits, max, batch.targets, vocab_begin);
    tp_.group->all_reduce_sum(std::span<float>(sums.sum_exp.data(), static_cast<std::size_t>(sums.sum_exp.size())));
    tp_.group->all_reduce_sum(std::span<float>(sums.target_logit_minus_max.data(), static_cast<std::size_t>(sums.target_logit_minus_max.size())));
    Scope s(timing_, OpClass::loss);
    auto ce = kernels::vocab_parallel_loss_and_grad<float>(logits, max, sums, batch.targets, vocab_begin);
    loss_sum_ += static_cast<double>(ce.mean_loss);
    cache->dlogits = ce.dlogits * static_cast<float>(loss_scale);
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
      for (Index i = 0; i < dy.rows(); ++i) pos.row((offset + i) % seq) += dy.row(i);
    }
    const Mat df = leave_back(dy);
    Scope s(timing_, OpClass::embedding);
    p("embedding.word").grad += kernels::vocab_parallel_embedding_backward<float>(df, c.ids, r * (m_.vocab_size / t), m_.vocab_size / t);
    dy = Mat();
  }
  caches_.erase(it);
  return dy;
}

}  // namespace meshwork::exec
