// The MoE layer of GptChunk: a top-k router and experts split over expert parallelism, tokens
// dispatched to their experts' ranks and combined back by all-to-all (Shazeer et al. 2017;
// Fedus et al. 2021; Lepikhin et al. 2021 for the expert-parallel all-to-all).
#include "exec/gpt.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "exec/gpt_detail.hpp"
#include "models/op_table.hpp"
#include "kernels/gelu.hpp"
#include "kernels/swiglu.hpp"

namespace meshwork::exec {

using namespace detail;

using models::OpPhase;

// The MoE layer's ops (models/op_table: router, router_topk, moe_permute, expert_fc1,
// expert_act, expert_fc2, moe_unpermute, mlp_residual) and its dispatch and combine, on the layer's cache. Pairs are (token, choice),
// index token * topk + choice; the send buffer holds them sorted by expert (so by owning EP
// rank). The buffers of the exchange hold the forward's rows, then the backward's gradients of
// the same rows.
void GptChunk::run_moe_op(std::string_view op, OpPhase phase, std::int64_t l, Cache& ca, LayerCache& lc) {
  if (!lc.moe) lc.moe = std::make_unique<MoeCache>();
  MoeCache& c = *lc.moe;
  const std::int64_t experts = m_.moe.num_moe_experts, k = m_.moe.moe_router_topk;
  const int ep = ep_->size();
  const std::int64_t local = experts / ep, first = ep_->rank() * local;
  const bool swiglu = m_.activation == plan::Activation::swiglu;
  const bool recompute = phase == OpPhase::recompute;
  Mat& cur = recompute ? ca.rcur : ca.cur;
  Mat& res = recompute ? ca.rres : ca.res;
  const auto ku = static_cast<std::size_t>(k);
  auto expert_param = [&](std::int64_t le, const char* name) -> Param& { return p(l, ("experts." + std::to_string(first + le) + "." + name).c_str()); };
  // Rows of local expert `le` from every TP member and EP source, in (member, source) order:
  // gathered from the TP-gathered buffer, or scattered to one of its layout.
  auto expert_rows = [&](std::int64_t le, const Mat& from) {
    Index n = 0;
    for (const auto& rows : c.tp_recv_rows) {
      for (int src = 0; src < ep; ++src) n += rows[static_cast<std::size_t>(src * local + le)];
    }
    Mat x(n, from.cols());
    Index at = 0;
    for (std::size_t tm = 0; tm < c.tp_recv_rows.size(); ++tm) {
      for (int src = 0; src < ep; ++src) {
        const auto i = static_cast<std::size_t>(src * local + le);
        x.middleRows(at, c.tp_recv_rows[tm][i]) = from.middleRows(c.tp_segment[tm][i], c.tp_recv_rows[tm][i]);
        at += c.tp_recv_rows[tm][i];
      }
    }
    return x;
  };
  auto put_rows = [&](std::int64_t le, const Mat& rows, Mat& to) {
    Index at = 0;
    for (std::size_t tm = 0; tm < c.tp_recv_rows.size(); ++tm) {
      for (int src = 0; src < ep; ++src) {
        const auto i = static_cast<std::size_t>(src * local + le);
        to.middleRows(c.tp_segment[tm][i], c.tp_recv_rows[tm][i]) = rows.middleRows(at, c.tp_recv_rows[tm][i]);
        at += c.tp_recv_rows[tm][i];
      }
    }
  };
  const int tp = tp_.group->size();
  const bool forward = phase == OpPhase::forward || recompute;

  if (op == "router" && forward) {
    // Mixture of experts (Shazeer et al. 2017, "Outrageously Large Neural Networks", §2; top-k
    // routing as Switch, Fedus et al. 2021, generalised to k): logits = y W_r, p = softmax(logits)
    // per token, the k largest p chosen (ties to the lower expert index), and the output the sum
    // over chosen experts of p_e * expert_e(y). The chosen probabilities are not renormalised
    // over the k, as Switch's gate (Fedus et al. 2021 §2.1) keeps its one; Megatron-core's
    // default and Mixtral take a softmax over the k chosen logits instead (a renormalisation), a
    // difference in the model, not in the parallelism that --verify checks. No capacity limit,
    // so no token is dropped (dropless, Gale et al. 2023), and no auxiliary load-balancing loss:
    // the gradient is exactly that of the loss above. The router's GEMM here; its softmax and
    // top-k (router_topk), the rows' sort by expert (moe_permute) and their return
    // (moe_unpermute) are ops of their own, as models/op_table prices them.
    lc.y2 = cur;
    c.logits = lc.y2 * p(l, "router.weight").value;
  } else if (op == "router_topk" && forward) {
    const Index tokens = c.logits.rows();
    c.probs.resize(tokens, experts);
    for (Index t = 0; t < tokens; ++t) {
      const float max = c.logits.row(t).maxCoeff();
      c.probs.row(t) = (c.logits.row(t).array() - max).exp().matrix();
      c.probs.row(t) /= c.probs.row(t).sum();
    }
    c.logits = Mat();
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
    // Pairs sorted by expert (a counting sort, stable: by token within an expert).
    c.rows_per_expert.assign(static_cast<std::size_t>(experts), 0);
    for (const auto e : c.expert) ++c.rows_per_expert[static_cast<std::size_t>(e)];
    std::vector<std::size_t> next(static_cast<std::size_t>(experts), 0);
    for (std::size_t e = 1; e < next.size(); ++e) next[e] = next[e - 1] + static_cast<std::size_t>(c.rows_per_expert[e - 1]);
    c.order.resize(c.expert.size());
    for (std::size_t q = 0; q < c.expert.size(); ++q) c.order[next[static_cast<std::size_t>(c.expert[q])]++] = q;
  } else if (op == "moe_permute" && forward) {
    const Mat& y = lc.y2;
    c.send.resize(static_cast<Index>(c.order.size()), y.cols());
    for (std::size_t i = 0; i < c.order.size(); ++i) c.send.row(static_cast<Index>(i)) = y.row(static_cast<Index>(c.order[i] / ku));
    if (ep == 1) dispatch(c, false);  // no EP instruction: the exchange is a copy
  } else if (op == "expert_fc1" && forward) {
    if (tp == 1) moe_tp_gather(c, false);  // no TP instruction: the gather is a copy
    c.x.assign(static_cast<std::size_t>(local), Mat());
    c.u.assign(c.x.size(), Mat());
    for (std::int64_t le = 0; le < local; ++le) {
      const auto e = static_cast<std::size_t>(le);
      c.x[e] = expert_rows(le, c.gathered);
      if (c.x[e].rows() > 0) c.u[e] = c.x[e] * expert_param(le, "fc1.weight").value;
    }
  } else if (op == "expert_act" && forward) {
    c.a.assign(c.x.size(), Mat());
    for (std::size_t e = 0; e < c.x.size(); ++e) {
      if (c.x[e].rows() > 0) c.a[e] = swiglu ? kernels::swiglu_forward<float>(c.u[e]) : kernels::bias_gelu_forward<float>(c.u[e], Vec::Zero(c.u[e].cols()));
    }
  } else if (op == "expert_fc2" && forward) {
    // Row-parallel fc2: this TP rank's slice of each output, summed over TP by the reduce-scatter.
    c.partial = Mat::Zero(c.gathered.rows(), c.gathered.cols());
    for (std::int64_t le = 0; le < local; ++le) {
      const auto e = static_cast<std::size_t>(le);
      if (c.x[e].rows() > 0) put_rows(le, Mat(c.a[e] * expert_param(le, "fc2.weight").value), c.partial);
    }
    if (tp == 1) moe_tp_reduce(c, false);
  } else if (op == "moe_unpermute" && forward) {
    if (ep == 1) combine(c, false);
    // Each pair's result back in pair order, weighted by its gate, summed per token.
    const Index tokens = lc.y2.rows(), h = lc.y2.cols();
    c.out.resize(c.back.rows(), h);
    for (std::size_t i = 0; i < c.order.size(); ++i) c.out.row(static_cast<Index>(c.order[i])) = c.back.row(static_cast<Index>(i));
    c.combined = Mat::Zero(tokens, h);
    for (std::size_t q = 0; q < c.gate.size(); ++q) c.combined.row(static_cast<Index>(q / ku)) += c.gate[q] * c.out.row(static_cast<Index>(q));
  } else if (op == "mlp_residual" && forward) {
    cur = res + c.combined;
    c.combined = Mat();
  } else if (op == "mlp_residual" && phase == OpPhase::backward_input) {
    // The residual's gradient passes to both branches: kept in `res` for the norm's backward,
    // and left in `cur` for the experts' (moe_unpermute).
    res = cur;
  } else if (op == "moe_unpermute" && phase == OpPhase::backward_input) {
    // Each pair's expert output gets gate * dy; its gate gets dy . output.
    const Mat& dy = cur;
    const Index tokens = lc.y2.rows(), h = lc.y2.cols();
    c.back.resize(static_cast<Index>(c.order.size()), h);
    c.dlogits = Mat::Zero(tokens, c.probs.cols());  // the probabilities' gradient until router_topk's backward
    for (std::size_t i = 0; i < c.order.size(); ++i) {
      const std::size_t q = c.order[i];
      c.back.row(static_cast<Index>(i)) = c.gate[q] * dy.row(static_cast<Index>(q / ku));
    }
    for (std::size_t q = 0; q < c.gate.size(); ++q) c.dlogits(static_cast<Index>(q / ku), c.expert[q]) += dy.row(static_cast<Index>(q / ku)).dot(c.out.row(static_cast<Index>(q)));
    if (ep == 1) combine(c, true);
  } else if (op == "expert_fc2" && phase == OpPhase::backward_input) {
    if (tp == 1) moe_tp_gather(c, true);
    c.dout.assign(static_cast<std::size_t>(local), Mat());
    c.du.assign(c.dout.size(), Mat());
    for (std::int64_t le = 0; le < local; ++le) {
      const auto e = static_cast<std::size_t>(le);
      if (c.x[e].rows() == 0) continue;
      c.dout[e] = expert_rows(le, c.gathered);
      c.du[e] = c.dout[e] * expert_param(le, "fc2.weight").value.transpose();  // the activation's gradient, until expert_act's
    }
  } else if (op == "expert_act" && phase == OpPhase::backward_input) {
    for (std::size_t e = 0; e < c.du.size(); ++e) {
      if (c.x[e].rows() == 0) continue;
      c.du[e] = swiglu ? kernels::swiglu_backward<float>(c.du[e], c.u[e]) : Mat(kernels::bias_gelu_backward<float>(c.du[e], c.u[e], Vec::Zero(c.u[e].cols())).dx);
    }
  } else if (op == "expert_fc1" && phase == OpPhase::backward_input) {
    // Column-parallel fc1: this TP rank's part of each input's gradient, summed over TP.
    c.partial = Mat::Zero(c.gathered.rows(), c.gathered.cols());
    for (std::int64_t le = 0; le < local; ++le) {
      const auto e = static_cast<std::size_t>(le);
      if (c.x[e].rows() > 0) put_rows(le, Mat(c.du[e] * expert_param(le, "fc1.weight").value.transpose()), c.partial);
    }
    if (tp == 1) moe_tp_reduce(c, true);
  } else if (op == "moe_permute" && phase == OpPhase::backward_input) {
    // The rows' gradients summed back into their tokens.
    if (ep == 1) dispatch(c, true);
    const Index tokens = lc.y2.rows(), h = lc.y2.cols();
    Mat dyin = Mat::Zero(tokens, h);
    for (std::size_t i = 0; i < c.order.size(); ++i) dyin.row(static_cast<Index>(c.order[i] / ku)) += c.send.row(static_cast<Index>(i));
    cur = std::move(dyin);
  } else if (op == "router_topk" && phase == OpPhase::backward_input) {
    // Softmax backward: dlogits = p * (dp - sum(p * dp)) per row.
    for (Index t = 0; t < c.dlogits.rows(); ++t) {
      const float dot = c.probs.row(t).dot(c.dlogits.row(t));
      c.dlogits.row(t) = (c.probs.row(t).array() * (c.dlogits.row(t).array() - dot)).matrix();
    }
  } else if (op == "router" && phase == OpPhase::backward_input) {
    cur.noalias() += c.dlogits * p(l, "router.weight").value.transpose();
  } else if (op == "router" && phase == OpPhase::backward_weight) {
    p(l, "router.weight").grad.noalias() += lc.y2.transpose() * c.dlogits;
    c.dlogits = Mat();
  } else if (op == "expert_fc2" && phase == OpPhase::backward_weight) {
    for (std::int64_t le = 0; le < local; ++le) {
      const auto e = static_cast<std::size_t>(le);
      if (c.x[e].rows() > 0) expert_param(le, "fc2.weight").grad.noalias() += c.a[e].transpose() * c.dout[e];
    }
    c.dout.clear();
  } else if (op == "expert_fc1" && phase == OpPhase::backward_weight) {
    for (std::int64_t le = 0; le < local; ++le) {
      const auto e = static_cast<std::size_t>(le);
      if (c.x[e].rows() > 0) expert_param(le, "fc1.weight").grad.noalias() += c.x[e].transpose() * c.du[e];
    }
    c.du.clear();
  } else {
    throw std::logic_error("the executor has no MoE op '" + std::string(op) + "' in phase " + std::string(models::to_string(phase)));
  }
}

// Expert parallelism (Lepikhin et al. 2021, GShard §2.2): each token's row goes to the EP rank
// that owns its expert by an all-to-all, and comes back by the reverse one.
void GptChunk::dispatch(MoeCache& c, bool backward) {
  const std::int64_t experts = m_.moe.num_moe_experts;
  const int ep = ep_->size();
  const std::int64_t local = experts / ep;
  const Index h = m_.hidden_size;
  if (backward) {
    // The received rows' gradients back to their senders.
    c.send.resize(static_cast<Index>(c.order.size()), h);
    ep_->all_to_all_v(std::span<const float>(c.rows.data(), static_cast<std::size_t>(c.rows.size())), c.recv_counts,
                      std::span<float>(c.send.data(), static_cast<std::size_t>(c.send.size())), c.send_counts);
    return;
  }
  // Rows per (member, local expert) both ways, then the rows themselves.
  c.recv_rows.assign(static_cast<std::size_t>(experts), 0);
  ep_->all_to_all(c.rows_per_expert, c.recv_rows);
  c.send_counts.assign(static_cast<std::size_t>(ep), 0);
  c.recv_counts.assign(static_cast<std::size_t>(ep), 0);
  c.segment.assign(static_cast<std::size_t>(experts), 0);
  Index received = 0;
  for (int d = 0; d < ep; ++d) {
    std::int64_t out_rows = 0, in_rows = 0;
    for (std::int64_t le = 0; le < local; ++le) {
      const auto i = static_cast<std::size_t>(d * local + le);
      out_rows += c.rows_per_expert[i];
      c.segment[i] = received + in_rows;
      in_rows += c.recv_rows[i];
    }
    received += in_rows;
    if (std::max(out_rows, in_rows) * h > std::numeric_limits<int>::max()) throw std::length_error("MoE dispatch of more than 2^31 floats to one rank");
    c.send_counts[static_cast<std::size_t>(d)] = static_cast<int>(out_rows * h);
    c.recv_counts[static_cast<std::size_t>(d)] = static_cast<int>(in_rows * h);
  }
  c.rows.resize(received, h);
  ep_->all_to_all_v(std::span<const float>(c.send.data(), static_cast<std::size_t>(c.send.size())), c.send_counts,
                    std::span<float>(c.rows.data(), static_cast<std::size_t>(c.rows.size())), c.recv_counts);
}

void GptChunk::combine(MoeCache& c, bool backward) {
  const Index h = m_.hidden_size;
  if (backward) {
    // The results' gradients to the experts that made them.
    c.results.resize(c.rows.rows(), h);
    ep_->all_to_all_v(std::span<const float>(c.back.data(), static_cast<std::size_t>(c.back.size())), c.send_counts,
                      std::span<float>(c.results.data(), static_cast<std::size_t>(c.results.size())), c.recv_counts);
    return;
  }
  c.back.resize(c.send.rows(), h);
  ep_->all_to_all_v(std::span<const float>(c.results.data(), static_cast<std::size_t>(c.results.size())), c.recv_counts,
                    std::span<float>(c.back.data(), static_cast<std::size_t>(c.back.size())), c.send_counts);
}

// Megatron-core's token dispatcher with expert tensor parallelism: after the EP all-to-all
// each TP rank holds the rows its own tokens sent; every TP rank's are gathered (each holds a
// column slice of every local expert's fc1, a row slice of its fc2), and the partial outputs
// are reduce-scattered back to the rows' TP rank. Blocks differ in size across TP ranks, so
// each is padded to the largest (the counts are gathered first).
void GptChunk::moe_tp_gather(MoeCache& c, bool backward) {
  Group& g = *tp_.group;
  const auto t = static_cast<std::size_t>(g.size());
  const Index h = m_.hidden_size;
  if (!backward) {
    const std::size_t runs = c.recv_rows.size();
    std::vector<std::uint64_t> mine(c.recv_rows.begin(), c.recv_rows.end()), all(runs * t);
    if (t > 1) g.all_gather(mine, all);
    else all = mine;  // TP 1: no collective (and no TP time in the Report)
    c.tp_recv_rows.assign(t, std::vector<std::int64_t>(runs));
    c.tp_segment.assign(t, std::vector<Index>(runs));
    c.tp_block = 0;
    for (std::size_t tm = 0; tm < t; ++tm) {
      Index total = 0;
      for (std::size_t i = 0; i < runs; ++i) total += c.tp_recv_rows[tm][i] = static_cast<std::int64_t>(all[tm * runs + i]);
      c.tp_block = std::max(c.tp_block, total);
    }
    // Runs in the order dispatch() received them: source member outermost, then local expert.
    for (std::size_t tm = 0; tm < t; ++tm) {
      Index at = static_cast<Index>(tm) * c.tp_block;
      for (std::size_t i = 0; i < runs; ++i) {
        c.tp_segment[tm][i] = at;
        at += c.tp_recv_rows[tm][i];
      }
    }
  }
  const Mat& from = backward ? c.results : c.rows;
  if (c.tp_block * static_cast<Index>(t) * h > std::numeric_limits<int>::max()) throw std::length_error("MoE TP gather of more than 2^31 floats");
  Mat padded = Mat::Zero(c.tp_block, h);
  padded.topRows(from.rows()) = from;
  if (t == 1) {
    c.gathered = std::move(padded);
    return;
  }
  c.gathered.resize(c.tp_block * static_cast<Index>(t), h);
  g.all_gather(std::span<const float>(padded.data(), static_cast<std::size_t>(padded.size())), std::span<float>(c.gathered.data(), static_cast<std::size_t>(c.gathered.size())));
}

void GptChunk::moe_tp_reduce(MoeCache& c, bool backward) {
  Group& g = *tp_.group;
  Mat mine(c.tp_block, m_.hidden_size);
  if (g.size() == 1) mine = std::move(c.partial);
  else g.reduce_scatter_sum(std::span<const float>(c.partial.data(), static_cast<std::size_t>(c.partial.size())), std::span<float>(mine.data(), static_cast<std::size_t>(mine.size())));
  Index rows = 0;
  for (const auto n : c.recv_rows) rows += n;
  (backward ? c.rows : c.results) = mine.topRows(rows);
  c.partial = Mat();
}

void GptChunk::ep_collective(std::string_view what, OpPhase phase, std::int64_t layer, int mb) {
  LayerCache& lc = layer_cache(cache(mb), layer);
  if (!lc.moe) throw std::logic_error("an EP instruction on layer " + std::to_string(layer) + " before its router");
  const bool backward = phase == OpPhase::backward_input;
  if (what.starts_with("ep_dispatch")) dispatch(*lc.moe, backward);
  else if (what.starts_with("ep_combine")) combine(*lc.moe, backward);
  else if (what == "moe_tp_all_gather") moe_tp_gather(*lc.moe, backward);
  else if (what == "moe_tp_reduce_scatter") moe_tp_reduce(*lc.moe, backward);
  else throw std::logic_error("an EP instruction the executor does not know: " + std::string(what));
}

}  // namespace meshwork::exec
