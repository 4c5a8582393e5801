#pragma once
// The executor's model: a GPT-style decoder chunk (some consecutive layers, with the
// embeddings when it is the first and the head and loss when it is the last) on one rank,
// split over tensor parallelism as Megatron does (Shoeybi et al. 2019 §3: column-parallel Q,
// K, V and first MLP layer, row-parallel output projections, vocabulary-parallel embedding and
// cross-entropy) and optionally over the sequence between them (Korthikanti et al. 2022 §4.2).
// Real maths on the CPU reference operators of kernels/, fp32.
//
// The chunk speaks the Program's vocabulary (models/op_table, models/program.hpp): the Trainer
// hands it one compute instruction at a time (`run`: "input_norm", "qkv", "attention", ... in
// their forward, input-gradient, weight-gradient or recomputation phase) and one TP or EP
// collective at a time (`tp_collective`, `ep_collective`), in the order the Program lists them.
// The tensor flowing between ops (an activation forward, its gradient backward) and the
// residual stream are the micro-batch's registers; the weight-gradient ops read what their
// input-gradient op left, so a zero-bubble schedule runs them where it puts them.

#include <array>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "exec/chunk.hpp"
#include "exec/group.hpp"
#include "exec/params.hpp"
#include "kernels/multi_head_attention.hpp"
#include "models/op_table.hpp"
#include "models/program.hpp"
#include "models/stage_times.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

// Where compute time goes, by the op kinds of models/op_table (models::to_string names them).
inline constexpr std::size_t kOpKinds = models::kNumOpKinds;
struct OpSeconds {
  std::array<double, kOpKinds> seconds{};
  double& operator[](models::OpKind k) { return seconds.at(static_cast<std::size_t>(k)); }
  double operator[](models::OpKind k) const { return seconds.at(static_cast<std::size_t>(k)); }
};

// The CPU backend's chunk (exec/chunk.hpp): real maths on kernels/, fp32, each parameter its
// own Mat.
class GptChunk final : public Chunk {
 public:
  // Layers [first_layer, first_layer + layers) of model `m`; `embedding` and `head` when this
  // chunk holds them (a head without the embedding keeps its own copy of a tied word embedding,
  // as Megatron's last stage does, kept equal by an all-reduce of its gradient).
  // `ep`: the expert-parallel group of an MoE model (nullptr: every expert on this rank); the
  // chunk holds the experts its EP rank owns (expert_owner) and dispatches tokens to the others.
  // `cp`: the context-parallel group (nullptr: the whole sequence on this rank); its members
  // hold the positions kernels::context_parallel_positions gives them (with `cp_load_balance`).
  GptChunk(const plan::ModelConfig& m, std::int64_t first_layer, std::int64_t layers, bool embedding, bool head, std::uint64_t seed,
           TensorParallel tp, Group* ep = nullptr, Group* cp = nullptr, bool cp_load_balance = true);
  explicit GptChunk(const ChunkConfig& c)
      : GptChunk(c.model, c.first_layer, c.layers, c.embedding, c.head, c.seed, c.tp, c.ep, c.cp, c.cp_load_balance) {}
  ~GptChunk() override;
  GptChunk(const GptChunk&) = delete;
  GptChunk& operator=(const GptChunk&) = delete;

  // Micro-batch `mb`'s forward starts: its tokens (read by the embedding and the loss) and the
  // previous chunk's output `x` (empty for the first chunk); the loss's gradient is scaled by
  // `loss_scale`.
  void begin_forward(int mb, const Batch& batch, Mat x, double loss_scale);
  // Its backward starts from the gradient of the chunk's output (empty for the head chunk).
  void begin_backward(int mb, Mat dy);
  // The tensor flowing out of the last op run on `mb`: the chunk's output after its forward,
  // the gradient of its input after its backward (empty on the head and the first chunk).
  [[nodiscard]] Mat& flowing_mat(int mb);

  // Chunk's interface (exec/chunk.hpp).
  void begin_forward(int mb, const Batch& batch, double loss_scale) override { begin_forward(mb, batch, Mat(), loss_scale); }
  void begin_backward(int mb) override { begin_backward(mb, Mat()); }
  void end_backward(int mb) override;
  std::span<float> receive(int mb, Index rows, Index cols) override;
  [[nodiscard]] std::span<const float> flowing(int mb) override;
  [[nodiscard]] std::vector<ParamSlot> slots() override;
  void release_values() override;
  void allocate_values() override;
  void values_changed() override {}  // the optimizer's values are the ones the ops read
  void zero_grads() override;

  // One compute instruction of the Program: op `op` of the op table in `phase`, of global layer
  // `layer` (-1 outside the layers) on micro-batch `mb`. Unknown ops are a std::logic_error.
  void run(std::string_view op, models::OpPhase phase, std::int64_t layer, int mb) override;
  // A TP collective of the Program on the flowing tensor (the recomputation's own in that phase):
  // all-gather of the sequence, reduce-scatter or all-reduce of a partial sum.
  void tp_collective(models::Collective c, models::OpPhase phase, int mb) override;
  // An MoE layer's dispatch or combine all-to-all (`what` "ep_dispatch" or "ep_combine"), or
  // its token dispatcher's TP all-gather or reduce-scatter ("moe_tp_..."), in the forward (or
  // recomputation) or the backward.
  void ep_collective(std::string_view what, models::OpPhase phase, std::int64_t layer, int mb) override;
  // Ring attention's exchanges (`what` "cp_ring_exchange": every member's K and V blocks,
  // before the attention's forward, recomputation or backward; "cp_grad_ring_exchange": the
  // blocks' K and V gradients back to their owners, after its backward).
  void cp_collective(std::string_view what, models::OpPhase phase, std::int64_t layer, int mb) override;

  // The whole forward and backward of micro-batch `mb` on one rank (TP 1): the op table's ops in
  // the order the Program lowers them, for the single-rank references of the CUDA checks.
  Mat forward(int mb, const Batch& batch, Mat x, double loss_scale);
  Mat backward(int mb, Mat dy);

  // The micro-batch losses so far (head chunk), unscaled means over their tokens.
  [[nodiscard]] double loss_sum() const override { return loss_sum_; }
  void reset_loss() override { loss_sum_ = 0; }

  [[nodiscard]] std::vector<Param>& params() { return params_; }
  [[nodiscard]] Param* find(const std::string& name);
  // Rows of this rank's activations per micro-batch (its sequence share with SP).
  [[nodiscard]] Index local_rows(Index tokens) const override;

 private:
  struct MoeCache;
  struct LayerCache;
  struct Cache;
  Cache& cache(int mb);
  LayerCache& layer_cache(Cache& c, std::int64_t layer);
  void run_layer_op(std::string_view op, models::OpPhase phase, std::int64_t l, Cache& c);
  void run_end_op(std::string_view op, models::OpPhase phase, Cache& c);
  void run_moe_op(std::string_view op, models::OpPhase phase, std::int64_t l, Cache& c, LayerCache& lc);
  // MoE: the exchange of the dispatched rows (and of their counts), of the experts' results,
  // and their gradients' mirror images; the trivial copies when EP is 1.
  void dispatch(MoeCache& c, bool backward);
  void combine(MoeCache& c, bool backward);
  // MoE with TP: the all-gather over TP of the dispatched rows (forward) or of their outputs'
  // gradients (backward), and the reduce-scatter of the experts' partial outputs (forward) or
  // of their inputs' partial gradients (backward); the trivial copies when TP is 1.
  void moe_tp_gather(MoeCache& c, bool backward);
  void moe_tp_reduce(MoeCache& c, bool backward);
  // Ring attention over the CP members' blocks (kernels/context_parallel_attention), visited
  // in ring order from this member's own; the backward leaves every block's K and V gradients
  // for the cp_grad exchange.
  struct RingBlocks {
    std::vector<Mat> k, v;                   // in ring order
    std::vector<std::vector<Index>> positions;
    std::vector<std::size_t> owner;          // the CP member each came from
  };
  // The exchanged blocks, moved out of the layer's cache in ring order.
  RingBlocks take_ring_blocks(LayerCache& lc);
  kernels::MultiHeadAttentionForward<float> cp_attention_forward(const Cache& c, LayerCache& lc, Index heads);
  void cp_attention_backward(const Cache& c, LayerCache& lc, const Mat& dout, Index heads, Index groups);
  Param& p(std::int64_t layer, const char* name);
  Param& p(const std::string& name);

  plan::ModelConfig m_;
  std::int64_t first_layer_, layers_;
  bool embedding_, head_;
  bool rope_;  // rotary positions (kernels/rope.hpp) in place of learned ones
  TensorParallel tp_;
  std::unique_ptr<Group> own_ep_;  // a group of one when no EP group is given
  Group* ep_;
  std::unique_ptr<Group> own_cp_;  // a group of one when no CP group is given
  Group* cp_;
  std::vector<std::vector<Index>> cp_positions_;  // per CP member: the positions it holds
  std::vector<Param> params_;
  std::map<std::string, std::size_t> index_;
  std::map<int, std::unique_ptr<Cache>> caches_;  // by micro-batch, from forward to the end of backward
  double loss_sum_ = 0;
};

}  // namespace meshwork::exec
