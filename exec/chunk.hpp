#pragma once
// A model chunk as the one Trainer (exec/trainer.hpp) plays it, whatever the backend: some
// consecutive layers of the model on one rank, with the embeddings when it is the first virtual
// stage and the head and loss when it is the last, split over tensor, expert and context
// parallelism. The Trainer hands it the Program's instructions one at a time (compute by
// op-table name, TP, EP and CP collectives) and moves its tensors between pipeline stages and
// through the optimizer; how the chunk holds them and which kernels run them is the backend's
// (issue 23: the CPU and CUDA backends differ only below this interface).
//
// Tensors cross the interface as float spans in the backend's memory (exec/backend.hpp): the
// host's on the CPU backend, the device's on the CUDA one. The Trainer never reads them; it
// passes them to exec::Group and to the Backend's copies and kernels.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "exec/group.hpp"
#include "exec/params.hpp"
#include "models/op_table.hpp"
#include "models/program.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

struct TensorParallel {
  Group* group = nullptr;  // the TP group (a LocalGroup when TP is 1)
  bool sequence_parallel = false;
};

// One micro-batch's tokens on this rank: ids[sample * seq + i], the token at global position
// positions[i] of its sample, and the next token as target. `seq` is positions.size(): the
// whole sequence, or a context-parallel member's share of it.
struct Batch {
  std::vector<std::int64_t> ids, targets;
  Index samples = 0, seq = 0;
  std::vector<Index> positions;
};

// What a chunk holds: layers [first_layer, first_layer + layers) of `model`, the embedding
// and the head when `embedding` and `head` (a head without the embedding keeps its own copy
// of a tied word embedding, as Megatron's last stage does), initialised from `seed`.
// `ep`: the expert-parallel group of an MoE model (nullptr: every expert on this rank); `cp`:
// the context-parallel group (nullptr: the whole sequence on this rank), its members holding
// the positions kernels::context_parallel_positions gives them (with `cp_load_balance`).
struct ChunkConfig {
  plan::ModelConfig model;
  std::int64_t first_layer = 0, layers = 0;
  bool embedding = false, head = false;
  std::uint64_t seed = 0;
  TensorParallel tp;
  Group* ep = nullptr;
  Group* cp = nullptr;
  bool cp_load_balance = true;
  // The plan's precision is fp8: the layers' linear GEMMs run in FP8 where the backend has FP8
  // GEMMs (CudaChunk); the CPU chunk computes in fp32 whatever the precision.
  bool fp8_gemms = false;
};

// One parameter of the chunk: its spec (the full tensor's), this rank's shard's shape, and
// its value and gradient in the backend's memory. A value released by ZeRO-3 is empty.
struct ParamSlot {
  const ParamSpec* spec = nullptr;
  Index rows = 0, cols = 0;
  std::span<float> value, grad;
  [[nodiscard]] std::size_t size() const { return static_cast<std::size_t>(rows * cols); }
};

class Chunk {
 public:
  virtual ~Chunk() = default;

  // Micro-batch `mb`'s forward starts: its tokens (read by the embedding and the loss); the
  // loss's gradient is scaled by `loss_scale`. A later stage's input arrives by receive().
  virtual void begin_forward(int mb, const Batch& batch, double loss_scale) = 0;
  // Its backward starts (from the loss on the head chunk, else from what receive() brings).
  virtual void begin_backward(int mb) = 0;
  // Drops micro-batch `mb`'s activations once its backward, weight gradients included, is done.
  virtual void end_backward(int mb) = 0;
  // The pipeline's tensors. receive() makes micro-batch `mb`'s flowing tensor rows x cols and
  // returns it for a pipeline receive to fill; flowing() is the tensor flowing out of the
  // last op run on `mb` (the chunk's output after its forward, the gradient of its input after
  // its backward), what a pipeline send carries.
  virtual std::span<float> receive(int mb, Index rows, Index cols) = 0;
  [[nodiscard]] virtual std::span<const float> flowing(int mb) = 0;

  // One compute instruction of the Program: op `op` of the op table in `phase`, of global layer
  // `layer` (-1 outside the layers) on micro-batch `mb`. Unknown ops are a std::logic_error.
  virtual void run(std::string_view op, models::OpPhase phase, std::int64_t layer, int mb) = 0;
  // A TP collective of the Program on the flowing tensor (the recomputation's own in that
  // phase): all-gather of the sequence, reduce-scatter or all-reduce of a partial sum.
  virtual void tp_collective(models::Collective c, models::OpPhase phase, int mb) = 0;
  // An MoE layer's dispatch or combine all-to-all ("ep_dispatch", "ep_combine") or its token
  // dispatcher's TP all-gather or reduce-scatter ("moe_tp_..."), forward, recomputation or backward.
  virtual void ep_collective(std::string_view what, models::OpPhase phase, std::int64_t layer, int mb) = 0;
  // Ring attention's exchanges ("cp_ring_exchange", "cp_grad_ring_exchange").
  virtual void cp_collective(std::string_view what, models::OpPhase phase, std::int64_t layer, int mb) = 0;

  // The micro-batch losses so far (head chunk), unscaled means over their tokens.
  [[nodiscard]] virtual double loss_sum() const = 0;
  virtual void reset_loss() = 0;
  // Rows of this rank's activations per micro-batch of `tokens` (its sequence share with SP).
  [[nodiscard]] virtual Index local_rows(Index tokens) const = 0;

  // This rank's parameters in the chunk's order (embeddings, layers, head), the experts its EP
  // rank owns among them. The spans stay valid until release_values, allocate_values or the
  // chunk's end.
  [[nodiscard]] virtual std::vector<ParamSlot> slots() = 0;
  // ZeRO-3: frees every dense (non-expert) parameter's value between uses; allocate_values
  // makes room for them again (their contents unspecified until written).
  virtual void release_values() = 0;
  virtual void allocate_values() = 0;
  // The Trainer wrote values through the slots (the optimizer's update, a gather, a restore):
  // a chunk that keeps other copies of them (bf16 for the GEMMs) refreshes them.
  virtual void values_changed() = 0;
  virtual void zero_grads() = 0;
};

}  // namespace meshwork::exec
