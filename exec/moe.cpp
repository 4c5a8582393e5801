// The MoE layer of GptChunk: a top-k router and experts split over expert parallelism, tokens
// dispatched to their experts' ranks and combined back by all-to-all (Shazeer et al. 2017;
// Fedus et al. 2021; Lepikhin et al. 2021 for the expert-parallel all-to-all).
#include "exec/gpt.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "exec/gpt_detail.hpp"
#include "kernels/gelu.hpp"
#include "kernels/swiglu.hpp"

namespace meshwork::exec {

using namespace detail;

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

}  // namespace meshwork::exec
