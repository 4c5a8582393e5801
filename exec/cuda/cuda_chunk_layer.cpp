#include <string>

#include "exec/cuda/cuda_chunk_impl.hpp"
#include "exec/cuda/materialised_attention.hpp"
#include "exec/gpt_detail.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/flash_attention.hpp"
#include "kernels/cuda/gelu.hpp"
#include "kernels/cuda/swiglu.hpp"
#include "exec/cuda/chunk_kernels.hpp"
#include "exec/cuda/gpt_cuda.hpp"

namespace meshwork::exec::cuda::chunk_detail {

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
  if (is_moe_layer(m_, l) && (op.starts_with("router") || op.starts_with("moe_") || op.starts_with("expert_") || op == "mlp_residual")) {
    run_moe_op(op, phase, l, c, lc);
    return;
  }
  if (forward) {
    if (op == "input_norm") {
      if (!recompute) lc.x = std::move(cur);
      res = clone(lc.x);
      cur = norm_forward(lc.x, p + "ln1", lc.mean1, lc.rstd1);
    } else if (op == "qkv") {
      lc.y1 = std::move(cur);
      lc.q = linear(lc.y1, W(p + "q.weight"), q_cols, false);
      lc.k = linear(lc.y1, W(p + "k.weight"), kv_cols, false);
      lc.v = linear(lc.y1, W(p + "v.weight"), kv_cols, false);
      add_bias_if(lc.q, p + "q.bias");
      add_bias_if(lc.k, p + "k.bias");
      add_bias_if(lc.v, p + "v.bias");
      if (rope_) {
        rope_at(lc.q.data(), rope_table_.data(), c.positions.data(), c.npos, lc.q.rows(), heads_, hd_, false, s_);
        rope_at(lc.k.data(), rope_table_.data(), c.positions.data(), c.npos, lc.k.rows(), groups_, hd_, false, s_);
      }
    } else if (op == "attention" && cp_ != nullptr) {
      cp_attention_forward(c, lc);
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
      if (materialised_for_ != bh) {
        // Once per shape, so that every layer, micro-batch and step runs the same kernels: P for
        // each layer of the chunk and backward's scratch, as CudaGpt decides it, in the memory
        // free now (the device's and what the stream-ordered pool keeps).
        materialised_ = false;
        if (seq >= kMaterialisedMinSeq) {
          const std::size_t needed = materialised_attention_probs_bytes(bh, seq) * static_cast<std::size_t>(layers_ + 1);
          materialised_ = needed + kReserveBytes <= free_device_bytes();
        }
        materialised_for_ = bh;
      }
      if (materialised_) {
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
      cur = linear(lc.att, W(p + "o.weight"), H, false);
    } else if (op == "attention_residual") {
      add_bias_if(cur, p + "o.bias");
      cur = add(res, cur);
      lc.x1 = clone(cur);
    } else if (op == "mlp_norm") {
      res = clone(cur);
      cur = norm_forward(cur, p + "ln2", lc.mean2, lc.rstd2);
    } else if (op == "mlp_fc1") {
      lc.y2 = std::move(cur);
      lc.u = linear(lc.y2, W(p + "fc1.weight"), ffn_in_local, false);
    } else if (op == "mlp_act") {
      lc.a = DMat(lc.u.rows(), ffn_local, s_);
      if (swiglu_) {
        add_bias_if(lc.u, p + "fc1.bias");  // as the CPU: the bias joins u before SwiGLU
        kernels::cuda::swiglu_forward<bf16>(lc.u.data(), lc.a.data(), lc.u.rows(), ffn_local, s_);
      } else {
        kernels::cuda::bias_gelu_forward<bf16>(lc.u.data(), bias_ ? W(p + "fc1.bias") : nullptr, lc.a.data(), lc.u.rows(), ffn_local, s_);
      }
    } else if (op == "mlp_fc2") {
      cur = linear(lc.a, W(p + "fc2.weight"), H, false);
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
      cur = linear(lc.dmf, W(p + "fc2.weight"), ffn_local, true);
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
      cur = linear(lc.du, W(p + "fc1.weight"), H, true);
    } else if (op == "mlp_norm") {
      cur = add(norm_backward(cur, lc.x1, p + "ln2", lc.mean2, lc.rstd2), res);
    } else if (op == "attention_residual") {
      res = clone(cur);
      bias_grad(cur, p + "o.bias");
    } else if (op == "attention_out") {
      lc.dof = std::move(cur);
      cur = linear(lc.dof, W(p + "o.weight"), q_cols, true);
    } else if (op == "attention" && cp_ != nullptr) {
      cp_attention_backward(c, lc, cur);
      cur = DMat();
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
      // dy1 = dq Wq^T + dk Wk^T + dv Wv^T, summed in fp32 and rounded once to bf16. Under FP8
      // each product comes out of its GEMM in bf16 first (linear_into), so there it is rounded
      // once per product and once more for the sum.
      const I rows = lc.dq.rows();
      DVec sum(rows, H, s_);
      linear_into(lc.dq, W(p + "q.weight"), sum.data(), H, true, false);
      linear_into(lc.dk, W(p + "k.weight"), sum.data(), H, true, true);
      linear_into(lc.dv, W(p + "v.weight"), sum.data(), H, true, true);
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

}  // namespace meshwork::exec::cuda::chunk_detail
