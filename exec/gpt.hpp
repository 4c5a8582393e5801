#pragma once
// The executor's model: a GPT-style decoder chunk (some consecutive layers, with the
// embeddings when it is the first and the head and loss when it is the last) on one rank,
// split over tensor parallelism as Megatron does (Shoeybi et al. 2019 §3: column-parallel Q,
// K, V and first MLP layer, row-parallel output projections, vocabulary-parallel embedding and
// cross-entropy) and optionally over the sequence between them (Korthikanti et al. 2022 §4.2).
// Real maths on the CPU reference operators of kernels/, fp32.

#include <array>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "exec/group.hpp"
#include "exec/params.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

// Where compute time goes, by the op kinds of models/op_table.
enum class OpClass : std::uint8_t { gemm, attention, norm, elementwise, embedding, loss, optimizer };
inline constexpr std::array kOpClassNames = {"gemm", "attention", "norm", "elementwise", "embedding", "loss", "optimizer"};
struct OpSeconds {
  std::array<double, kOpClassNames.size()> seconds{};
  double& operator[](OpClass c) { return seconds[static_cast<std::size_t>(c)]; }
};

struct TensorParallel {
  Group* group = nullptr;  // the TP group (a LocalGroup when TP is 1)
  bool sequence_parallel = false;
};

// One micro-batch's tokens: ids[sample * seq + position] and the next token as target.
struct Batch {
  std::vector<std::int64_t> ids, targets;
  Index samples = 0, seq = 0;
};

class GptChunk {
 public:
  // Layers [first_layer, first_layer + layers) of model `m`; `embedding` and `head` when this
  // chunk holds them; `tied_copy` when the head uses its own copy of the word embedding (the
  // last pipeline stage, as Megatron keeps one, kept equal by an all-reduce of its gradient).
  // `ep`: the expert-parallel group of an MoE model (nullptr: every expert on this rank); the
  // chunk holds the experts its EP rank owns (expert_owner) and dispatches tokens to the others.
  GptChunk(const plan::ModelConfig& m, std::int64_t first_layer, std::int64_t layers, bool embedding, bool head, std::uint64_t seed,
           TensorParallel tp, OpSeconds* timing, Group* ep = nullptr);
  ~GptChunk();
  GptChunk(const GptChunk&) = delete;
  GptChunk& operator=(const GptChunk&) = delete;

  // Forward of micro-batch `mb`: from the batch (first chunk) or the previous chunk's output
  // `x`; returns the output, or for the head chunk an empty matrix (the loss is kept).
  Mat forward(int mb, const Batch& batch, Mat x, double loss_scale);
  // Backward of micro-batch `mb` given the gradient of its output (nothing for the head
  // chunk); accumulates parameter gradients and returns the input's gradient (empty for the
  // first chunk).
  Mat backward(int mb, Mat dy);
  // The micro-batch losses so far (head chunk), unscaled means over their tokens.
  [[nodiscard]] double loss_sum() const { return loss_sum_; }
  void reset_loss() { loss_sum_ = 0; }

  [[nodiscard]] std::vector<Param>& params() { return params_; }
  [[nodiscard]] Param* find(const std::string& name);
  // Rows of this rank's activations per micro-batch (its sequence share with SP).
  [[nodiscard]] Index local_rows(Index tokens) const;

 private:
  struct MoeCache;
  struct LayerCache;
  struct Cache;
  Mat layer_forward(std::int64_t l, const Mat& x, LayerCache& c);
  Mat layer_backward(std::int64_t l, const Mat& dy, const LayerCache& c);
  // An MoE layer's MLP on its normalised input y: the output and, backward, y's gradient.
  Mat moe_forward(std::int64_t l, const Mat& y, MoeCache& c);
  Mat moe_backward(std::int64_t l, const Mat& dy, const Mat& y, const MoeCache& c);
  // Local experts' MLPs on their received rows (forward caches; backward accumulates grads).
  Mat experts_forward(std::int64_t l, const Mat& rows, MoeCache& c);
  Mat experts_backward(std::int64_t l, const Mat& drows, const MoeCache& c);
  Param& p(std::int64_t layer, const char* name);
  Param& p(const std::string& name);

  // Tensor-parallel regions (Megatron's f and g; with SP their all-gather / reduce-scatter).
  Mat enter(const Mat& x);       // into a column-parallel layer
  Mat enter_back(const Mat& d);  // its backward
  Mat leave(const Mat& partial); // out of a row-parallel layer
  Mat leave_back(const Mat& d);  // its backward

  plan::ModelConfig m_;
  std::int64_t first_layer_, layers_;
  bool embedding_, head_;
  TensorParallel tp_;
  OpSeconds* timing_;
  std::unique_ptr<Group> own_ep_;  // a group of one when no EP group is given
  Group* ep_;
  std::vector<Param> params_;
  std::map<std::string, std::size_t> index_;
  std::map<int, std::unique_ptr<Cache>> caches_;  // by micro-batch, between forward and backward
  double loss_sum_ = 0;
};

}  // namespace meshwork::exec
