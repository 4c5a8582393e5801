// CudaChunk's MoE layer: GptChunk::run_moe_op (exec/moe.cpp) on the device, op for op, with the
// same routing (softmax over the experts, the k largest probabilities, ties to the lower index,
// gates not renormalised; dropless, no auxiliary loss), the same send order (pairs sorted by
// expert, by token within one), the same exchanges (EP all-to-all of the rows, TP all-gather of
// the received rows and reduce-scatter of the partial outputs with expert tensor parallelism).
// The routing is decided on the host from the router's fp32 logits; rows move on the device by
// index; each local expert's GEMMs run one after the other.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "exec/cuda/chunk_kernels.hpp"
#include "exec/cuda/cuda_chunk_impl.hpp"
#include "kernels/cuda/gelu.hpp"
#include "kernels/cuda/swiglu.hpp"

namespace meshwork::exec::cuda::chunk_detail {

namespace {

template <class T>
Dev<T> upload(const std::vector<T>& host, cudaStream_t s) {
  Dev<T> d(static_cast<I>(host.size()), 1, s);
  if (!host.empty()) MESHWORK_CUDA_CHECK(cudaMemcpyAsync(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice, s));
  return d;
}

DMat zeros(I rows, I cols, cudaStream_t s) {
  DMat x(rows, cols, s);
  if (!x.empty()) MESHWORK_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.bytes(), s));
  return x;
}

void copy_rows(const DMat& from, I from_row, DMat& to, I to_row, I rows, cudaStream_t s) {
  if (rows <= 0) return;
  MESHWORK_CUDA_CHECK(cudaMemcpyAsync(to.data() + to_row * to.cols(), from.data() + from_row * from.cols(),
                                      static_cast<std::size_t>(rows * from.cols()) * sizeof(bf16), cudaMemcpyDeviceToDevice, s));
}

}  // namespace

DMat CudaChunk::exchange_rows(const DMat& x, const std::vector<int>& send_counts, const std::vector<int>& recv_counts, I recv_rows) const {
  // EP 1: the exchange is a copy, made here (a LocalGroup's copies are the host's).
  if (ep_->size() == 1) return clone(x);
  const I h = m_.hidden_size;
  DVec wide(x.rows(), h, s_), got(recv_rows, h, s_);
  widen(x.data(), wide.data(), x.size(), s_);
  ep_->all_to_all_v(std::span<const float>(wide.data(), static_cast<std::size_t>(wide.size())), send_counts,
                    std::span<float>(got.data(), static_cast<std::size_t>(got.size())), recv_counts);
  DMat y(recv_rows, h, s_);
  convert(got.data(), y.data(), got.size(), s_);
  return y;
}

void CudaChunk::run_moe_op(std::string_view op, OpPhase phase, I l, Cache& ca, LayerCache& lc) {
  if (!lc.moe) lc.moe = std::make_unique<MoeCache>();
  MoeCache& c = *lc.moe;
  const I experts = m_.moe.num_moe_experts, k = m_.moe.moe_router_topk, H = m_.hidden_size;
  const int ep = ep_->size();
  const I local = experts / ep, first = ep_->rank() * local;
  const I f_local = expert_ffn(m_) / t_, f_in_local = f_local * (swiglu_ ? 2 : 1);
  const bool recompute = phase == OpPhase::recompute;
  const bool forward = phase == OpPhase::forward || recompute;
  DMat& cur = recompute ? ca.rcur : ca.cur;
  DMat& res = recompute ? ca.rres : ca.res;
  const auto ku = static_cast<std::size_t>(k);
  const int tp = tp_.group->size();
  auto expert_name = [&](I le, const char* name) { return "layers." + std::to_string(l) + ".experts." + std::to_string(first + le) + "." + name; };
  const std::string router = "layers." + std::to_string(l) + ".router.weight";
  // Rows of local expert `le` from every TP member and EP source, in (member, source) order.
  auto expert_rows = [&](I le, const DMat& from) {
    I n = 0;
    for (const auto& rows : c.tp_recv_rows) {
      for (int src = 0; src < ep; ++src) n += rows[static_cast<std::size_t>(src * local + le)];
    }
    DMat x(n, from.cols(), s_);
    I at = 0;
    for (std::size_t tm = 0; tm < c.tp_recv_rows.size(); ++tm) {
      for (int src = 0; src < ep; ++src) {
        const auto i = static_cast<std::size_t>(src * local + le);
        copy_rows(from, c.tp_segment[tm][i], x, at, c.tp_recv_rows[tm][i], s_);
        at += c.tp_recv_rows[tm][i];
      }
    }
    return x;
  };
  auto put_rows = [&](I le, const DMat& rows, DMat& to) {
    I at = 0;
    for (std::size_t tm = 0; tm < c.tp_recv_rows.size(); ++tm) {
      for (int src = 0; src < ep; ++src) {
        const auto i = static_cast<std::size_t>(src * local + le);
        copy_rows(rows, at, to, c.tp_segment[tm][i], c.tp_recv_rows[tm][i], s_);
        at += c.tp_recv_rows[tm][i];
      }
    }
  };
  auto rows_of = [&](std::size_t e) { return e < c.x.size() ? c.x[e].rows() : I{0}; };

  if (op == "router" && forward) {
    // The router's GEMM; its softmax and top-k (router_topk), the rows' sort by expert
    // (moe_permute) and their return (moe_unpermute) are ops of their own, as on the CPU.
    lc.y2 = clone(cur);
    const I tokens = lc.y2.rows();
    c.logits = DVec(tokens, experts, s_);
    ctx_.gemm.matmul(lc.y2.data(), W(router), c.logits.data(), tokens, experts, H, false, false, 1.0F, 0.0F, s_);
  } else if (op == "router_topk" && forward) {
    const I tokens = lc.y2.rows();
    std::vector<float> host(static_cast<std::size_t>(tokens * experts));
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(host.data(), c.logits.data(), c.logits.bytes(), cudaMemcpyDeviceToHost, s_));
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s_));
    c.logits = DVec();
    // GptChunk's routing, on the host (exec/moe.cpp cites it).
    c.probs.assign(host.size(), 0.0F);
    for (I t = 0; t < tokens; ++t) {
      const float* row = host.data() + t * experts;
      float* p = c.probs.data() + t * experts;
      const float max = *std::max_element(row, row + experts);
      float sum = 0;
      for (I e = 0; e < experts; ++e) sum += p[e] = std::exp(row[e] - max);
      for (I e = 0; e < experts; ++e) p[e] /= sum;
    }
    c.expert.resize(static_cast<std::size_t>(tokens * k));
    c.gate.resize(c.expert.size());
    std::vector<I> idx(static_cast<std::size_t>(experts));
    for (I t = 0; t < tokens; ++t) {
      const float* p = c.probs.data() + t * experts;
      std::iota(idx.begin(), idx.end(), I{0});
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](I a, I b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      for (I j = 0; j < k; ++j) {
        const auto q = static_cast<std::size_t>(t * k + j);
        c.expert[q] = idx[static_cast<std::size_t>(j)];
        c.gate[q] = p[c.expert[q]];
      }
    }
    c.rows_per_expert.assign(static_cast<std::size_t>(experts), 0);
    for (const auto e : c.expert) ++c.rows_per_expert[static_cast<std::size_t>(e)];
    std::vector<std::size_t> next(static_cast<std::size_t>(experts), 0);
    for (std::size_t e = 1; e < next.size(); ++e) next[e] = next[e - 1] + static_cast<std::size_t>(c.rows_per_expert[e - 1]);
    c.order.resize(c.expert.size());
    for (std::size_t q = 0; q < c.expert.size(); ++q) c.order[next[static_cast<std::size_t>(c.expert[q])]++] = q;
    std::vector<std::int64_t> token(c.order.size()), pair(c.order.size()), send_of(c.order.size());
    std::vector<float> gate_sends(c.order.size());
    for (std::size_t i = 0; i < c.order.size(); ++i) {
      token[i] = static_cast<std::int64_t>(c.order[i] / ku);
      pair[i] = static_cast<std::int64_t>(c.order[i]);
      send_of[c.order[i]] = static_cast<std::int64_t>(i);
      gate_sends[i] = c.gate[c.order[i]];
    }
    c.send_token = upload(token, s_);
    c.pair_of_send = upload(pair, s_);
    c.send_of_pair = upload(send_of, s_);
    c.gate_pairs = upload(c.gate, s_);
    c.gate_sends = upload(gate_sends, s_);
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s_));  // the host vectors above are temporaries
  } else if (op == "moe_permute" && forward) {
    c.send = DMat(static_cast<I>(c.order.size()), H, s_);
    gather_rows_scaled(lc.y2.data(), c.send_token.data(), nullptr, c.send.data(), c.send.rows(), H, s_);
    if (ep == 1) dispatch(c, false);  // no EP instruction: the exchange is a copy
  } else if (op == "expert_fc1" && forward) {
    if (tp == 1) moe_tp_gather(c, false);
    c.x.clear();
    c.u.clear();
    for (I le = 0; le < local; ++le) {
      c.x.push_back(expert_rows(le, c.gathered));
      c.u.emplace_back();
      if (c.x.back().rows() > 0) c.u.back() = linear(c.x.back(), W(expert_name(le, "fc1.weight")), f_in_local, false);
    }
  } else if (op == "expert_act" && forward) {
    c.a.clear();
    for (std::size_t e = 0; e < c.x.size(); ++e) {
      c.a.emplace_back();
      if (rows_of(e) == 0) continue;
      c.a.back() = DMat(rows_of(e), f_local, s_);
      if (swiglu_) kernels::cuda::swiglu_forward<bf16>(c.u[e].data(), c.a.back().data(), rows_of(e), f_local, s_);
      else kernels::cuda::bias_gelu_forward<bf16>(c.u[e].data(), nullptr, c.a.back().data(), rows_of(e), f_local, s_);
    }
  } else if (op == "expert_fc2" && forward) {
    // Row-parallel fc2: this TP rank's slice of each output, summed over TP by the reduce-scatter.
    c.partial = zeros(c.gathered.rows(), H, s_);
    for (I le = 0; le < local; ++le) {
      if (rows_of(static_cast<std::size_t>(le)) > 0) put_rows(le, linear(c.a[static_cast<std::size_t>(le)], W(expert_name(le, "fc2.weight")), H, false), c.partial);
    }
    if (tp == 1) moe_tp_reduce(c, false);
  } else if (op == "moe_unpermute" && forward) {
    if (ep == 1) combine(c, false);
    const I tokens = lc.y2.rows();
    c.out = DMat(c.back.rows(), H, s_);
    scatter_rows(c.back.data(), c.pair_of_send.data(), c.out.data(), c.back.rows(), H, s_);
    // The gated sum with the residual added in the same kernel (moe_combine): mlp_residual
    // then only hands it on.
    c.combined = DMat(tokens, H, s_);
    moe_combine(res.data(), c.out.data(), c.gate_pairs.data(), k, tokens, H, c.combined.data(), s_);
  } else if (op == "mlp_residual" && forward) {
    cur = std::move(c.combined);
  } else if (op == "mlp_residual" && phase == OpPhase::backward_input) {
    // The residual's gradient passes to both branches: kept in `res` for the norm's backward,
    // and left in `cur` for the experts' (moe_unpermute).
    res = clone(cur);
  } else if (op == "moe_unpermute" && phase == OpPhase::backward_input) {
    // Each pair's expert output gets gate * dy; its gate gets dy . output.
    const I tokens = lc.y2.rows(), pairs = tokens * k;
    c.back = DMat(pairs, H, s_);
    gather_rows_scaled(cur.data(), c.send_token.data(), c.gate_sends.data(), c.back.data(), pairs, H, s_);
    DVec dots(pairs, 1, s_);
    pair_dots(cur.data(), c.out.data(), k, pairs, H, dots.data(), s_);
    std::vector<float> host(static_cast<std::size_t>(pairs));
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(host.data(), dots.data(), dots.bytes(), cudaMemcpyDeviceToHost, s_));
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s_));
    c.dprobs.assign(static_cast<std::size_t>(tokens * experts), 0.0F);
    for (std::size_t q = 0; q < host.size(); ++q) c.dprobs[(q / ku) * static_cast<std::size_t>(experts) + static_cast<std::size_t>(c.expert[q])] += host[q];
    if (ep == 1) combine(c, true);
  } else if (op == "expert_fc2" && phase == OpPhase::backward_input) {
    if (tp == 1) moe_tp_gather(c, true);
    c.dout.clear();
    c.du.clear();
    for (I le = 0; le < local; ++le) {
      c.dout.emplace_back();
      c.du.emplace_back();
      if (rows_of(static_cast<std::size_t>(le)) == 0) continue;
      c.dout.back() = expert_rows(le, c.gathered);
      c.du.back() = linear(c.dout.back(), W(expert_name(le, "fc2.weight")), f_local, true);  // the activation's gradient, until expert_act's
    }
  } else if (op == "expert_act" && phase == OpPhase::backward_input) {
    for (std::size_t e = 0; e < c.du.size(); ++e) {
      if (rows_of(e) == 0) continue;
      DMat du(rows_of(e), f_in_local, s_);
      if (swiglu_) kernels::cuda::swiglu_backward<bf16>(c.du[e].data(), c.u[e].data(), du.data(), rows_of(e), f_local, s_);
      else kernels::cuda::bias_gelu_backward<bf16>(c.du[e].data(), c.u[e].data(), nullptr, du.data(), nullptr, rows_of(e), f_local, s_);
      c.du[e] = std::move(du);
    }
  } else if (op == "expert_fc1" && phase == OpPhase::backward_input) {
    // Column-parallel fc1: this TP rank's part of each input's gradient, summed over TP.
    c.partial = zeros(c.gathered.rows(), H, s_);
    for (I le = 0; le < local; ++le) {
      if (rows_of(static_cast<std::size_t>(le)) > 0) put_rows(le, linear(c.du[static_cast<std::size_t>(le)], W(expert_name(le, "fc1.weight")), H, true), c.partial);
    }
    if (tp == 1) moe_tp_reduce(c, true);
  } else if (op == "moe_permute" && phase == OpPhase::backward_input) {
    // The rows' gradients summed back into their tokens.
    if (ep == 1) dispatch(c, true);
    const I tokens = lc.y2.rows();
    DMat dyin(tokens, H, s_);
    sum_pair_rows(c.send.data(), c.send_of_pair.data(), k, tokens, H, dyin.data(), s_);
    cur = std::move(dyin);
  } else if (op == "router_topk" && phase == OpPhase::backward_input) {
    const I tokens = lc.y2.rows();
    // Softmax backward on the host: dlogits = p * (dp - sum(p * dp)) per row.
    std::vector<float> dlogits(c.dprobs.size());
    for (I t = 0; t < tokens; ++t) {
      const float* p = c.probs.data() + t * experts;
      const float* dp = c.dprobs.data() + t * experts;
      float dot = 0;
      for (I e = 0; e < experts; ++e) dot += p[e] * dp[e];
      for (I e = 0; e < experts; ++e) dlogits[static_cast<std::size_t>(t * experts + e)] = p[e] * (dp[e] - dot);
    }
    const Dev<float> wide = upload(dlogits, s_);
    c.dlogits = DMat(tokens, experts, s_);
    convert(wide.data(), c.dlogits.data(), wide.size(), s_);
    MESHWORK_CUDA_CHECK(cudaStreamSynchronize(s_));  // `dlogits` (host) is a temporary
    std::vector<float>().swap(c.dprobs);  // read: its host memory back
  } else if (op == "router" && phase == OpPhase::backward_input) {
    // dyin += dlogits W_r^T, summed in fp32 and rounded once.
    const I tokens = lc.y2.rows();
    const DMat dyin = std::move(cur);
    DVec sum(tokens, H, s_);
    widen(dyin.data(), sum.data(), dyin.size(), s_);
    ctx_.gemm.matmul(c.dlogits.data(), W(router), sum.data(), tokens, H, experts, false, true, 1.0F, 1.0F, s_);
    cur = DMat(tokens, H, s_);
    convert(sum.data(), cur.data(), sum.size(), s_);
  } else if (op == "router" && phase == OpPhase::backward_weight) {
    weight_grad(lc.y2, c.dlogits, router);
    c.dlogits = DMat();
  } else if (op == "expert_fc2" && phase == OpPhase::backward_weight) {
    for (I le = 0; le < local; ++le) {
      const auto e = static_cast<std::size_t>(le);
      if (rows_of(e) > 0) weight_grad(c.a[e], c.dout[e], expert_name(le, "fc2.weight"));
    }
    c.dout.clear();
  } else if (op == "expert_fc1" && phase == OpPhase::backward_weight) {
    for (I le = 0; le < local; ++le) {
      const auto e = static_cast<std::size_t>(le);
      if (rows_of(e) > 0) weight_grad(c.x[e], c.du[e], expert_name(le, "fc1.weight"));
    }
    c.du.clear();
  } else {
    throw std::logic_error("the CUDA chunk has no MoE op '" + std::string(op) + "' in phase " + std::string(models::to_string(phase)));
  }
}

// GptChunk::dispatch: each row to the EP member that owns its expert, and back.
void CudaChunk::dispatch(MoeCache& c, bool backward) {
  const I experts = m_.moe.num_moe_experts, H = m_.hidden_size;
  const int ep = ep_->size();
  const I local = experts / ep;
  if (backward) {
    c.send = exchange_rows(c.rows, c.recv_counts, c.send_counts, static_cast<I>(c.order.size()));
    return;
  }
  c.recv_rows.assign(static_cast<std::size_t>(experts), 0);
  ep_->all_to_all(c.rows_per_expert, c.recv_rows);
  c.send_counts.assign(static_cast<std::size_t>(ep), 0);
  c.recv_counts.assign(static_cast<std::size_t>(ep), 0);
  c.segment.assign(static_cast<std::size_t>(experts), 0);
  I received = 0;
  for (int d = 0; d < ep; ++d) {
    std::int64_t out_rows = 0, in_rows = 0;
    for (I le = 0; le < local; ++le) {
      const auto i = static_cast<std::size_t>(d * local + le);
      out_rows += c.rows_per_expert[i];
      c.segment[i] = received + in_rows;
      in_rows += c.recv_rows[i];
    }
    received += in_rows;
    if (std::max(out_rows, in_rows) * H > std::numeric_limits<int>::max()) throw std::length_error("MoE dispatch of more than 2^31 floats to one rank");
    c.send_counts[static_cast<std::size_t>(d)] = static_cast<int>(out_rows * H);
    c.recv_counts[static_cast<std::size_t>(d)] = static_cast<int>(in_rows * H);
  }
  c.rows = exchange_rows(c.send, c.send_counts, c.recv_counts, received);
}

void CudaChunk::combine(MoeCache& c, bool backward) {
  if (backward) {
    c.results = exchange_rows(c.back, c.send_counts, c.recv_counts, c.rows.rows());
    return;
  }
  c.back = exchange_rows(c.results, c.recv_counts, c.send_counts, c.send.rows());
}

// GptChunk::moe_tp_gather and moe_tp_reduce: expert tensor parallelism's exchanges, each TP
// member's block padded to the largest.
void CudaChunk::moe_tp_gather(MoeCache& c, bool backward) {
  Group& g = *tp_.group;
  const auto t = static_cast<std::size_t>(g.size());
  const I H = m_.hidden_size;
  if (!backward) {
    const std::size_t runs = c.recv_rows.size();
    std::vector<std::uint64_t> mine(c.recv_rows.begin(), c.recv_rows.end()), all(runs * t);
    if (t > 1) g.all_gather(mine, all);
    else all = mine;
    c.tp_recv_rows.assign(t, std::vector<std::int64_t>(runs));
    c.tp_segment.assign(t, std::vector<Index>(runs));
    c.tp_block = 0;
    for (std::size_t tm = 0; tm < t; ++tm) {
      Index total = 0;
      for (std::size_t i = 0; i < runs; ++i) total += c.tp_recv_rows[tm][i] = static_cast<std::int64_t>(all[tm * runs + i]);
      c.tp_block = std::max(c.tp_block, total);
    }
    for (std::size_t tm = 0; tm < t; ++tm) {
      Index at = static_cast<Index>(tm) * c.tp_block;
      for (std::size_t i = 0; i < runs; ++i) {
        c.tp_segment[tm][i] = at;
        at += c.tp_recv_rows[tm][i];
      }
    }
  }
  const DMat& from = backward ? c.results : c.rows;
  if (c.tp_block * static_cast<Index>(t) * H > std::numeric_limits<int>::max()) throw std::length_error("MoE TP gather of more than 2^31 floats");
  DMat padded = zeros(c.tp_block, H, s_);
  copy_rows(from, 0, padded, 0, from.rows(), s_);
  c.gathered = t == 1 ? std::move(padded) : gather_rows(g, padded);
}

void CudaChunk::moe_tp_reduce(MoeCache& c, bool backward) {
  Group& g = *tp_.group;
  DMat mine = g.size() == 1 ? std::move(c.partial) : reduce_scatter_rows(g, c.partial);
  Index rows = 0;
  for (const auto n : c.recv_rows) rows += n;
  DMat kept(rows, m_.hidden_size, s_);
  copy_rows(mine, 0, kept, 0, rows, s_);
  (backward ? c.rows : c.results) = std::move(kept);
  c.partial = DMat();
}

void CudaChunk::ep_collective(std::string_view what, OpPhase phase, std::int64_t layer, int mb) {
  LayerCache& lc = layer_cache(cache(mb), layer);
  if (!lc.moe) throw std::logic_error("an EP instruction on layer " + std::to_string(layer) + " before its router");
  const bool backward = phase == OpPhase::backward_input;
  if (what.starts_with("ep_dispatch")) dispatch(*lc.moe, backward);
  else if (what.starts_with("ep_combine")) combine(*lc.moe, backward);
  else if (what == "moe_tp_all_gather") moe_tp_gather(*lc.moe, backward);
  else if (what == "moe_tp_reduce_scatter") moe_tp_reduce(*lc.moe, backward);
  else throw std::logic_error("an EP instruction the CUDA chunk does not know: " + std::string(what));
}

}  // namespace meshwork::exec::cuda::chunk_detail
