#pragma once
// One rank's data-parallel training on one GPU: the whole model as CudaGpt (bf16, fp32 master
// parameters), the rank's share of each step's global batch (exec/synthetic_batch.hpp, the
// same tokens the CPU trainer takes), the data-parallel mean of the gradients by NCCL
// all-reduce, and AdamW. Plans with tensor, pipeline, context or expert parallelism, or ZeRO,
// are refused: the multi-dimension CUDA mesh is future work.
//
// The gradient reduction runs on its own stream (dp). With
// plan.parallelism.overlap.grad_reduce it is bucketed (CudaGpt::grad_buckets: the head, each
// layer, the embeddings) and each bucket's all-reduce is enqueued as the last micro-batch's
// backward completes it, ordered by an event recorded on the compute stream, so that it runs
// while backward goes on (PyTorch DDP's bucketed reduction, Li et al. 2020 §3.2; Megatron's
// overlap_grad_reduce). Without it, one all-reduce of the whole flat buffer follows backward.
// Either way the compute stream waits for the dp stream before the optimizer.
//
// MPI must be initialised: the constructor and step() are collective over MPI_COMM_WORLD
// (one rank per GPU of the plan).

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/cuda/gpt_cuda.hpp"
#include "exec/cuda/nccl_group.hpp"
#include "exec/cuda/streams.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec::cuda {

struct CudaTrainerOptions {
  double timeout_s = 300;  // the DP group's watchdog (creation, each wait); 0: none
  // Called by the watchdog with its message before it throws (a program may end the job here).
  std::function<void(const std::string&)> on_timeout;
  AttentionPath attention = AttentionPath::automatic;
};

class CudaTrainer {
 public:
  // What keeps the trainer from running `plan`, one entry per field (empty: nothing).
  [[nodiscard]] static std::vector<std::string> unsupported(const plan::Plan& plan);

  // Collective: selects this rank's GPU (its rank on the node modulo the node's GPUs), builds
  // the model from the plan's seed and the DP group's NCCL communicator (its id from world
  // rank 0 over MPI). Throws std::invalid_argument listing every unsupported field, or when
  // the job's size is not the plan's.
  explicit CudaTrainer(const plan::Plan& plan, CudaTrainerOptions options = {});
  ~CudaTrainer();
  CudaTrainer(const CudaTrainer&) = delete;
  CudaTrainer& operator=(const CudaTrainer&) = delete;

  // One step (1-based): forward and backward of this rank's micro-batches, the DP mean of the
  // gradients, then `before_update` (if given: it sees the model holding the reduced
  // gradients, for --verify) and AdamW. Returns the step's loss, the mean over the global
  // batch, on every rank. Waits for the device.
  double step(std::int64_t step, const std::function<void(CudaGpt&)>& before_update = {});

  // Device milliseconds since construction: CudaGpt's per op kind (models::to_string(models::OpKind)), "dp" (the
  // all-reduces and their scaling on the dp stream, overlapped or not) and "dp_exposed" (what
  // the compute stream waited for them after backward: all of "dp" without overlap).
  [[nodiscard]] std::map<std::string, double, std::less<>> op_ms();

  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] std::int64_t dp_rank() const { return dp_rank_; }
  [[nodiscard]] std::int64_t dp_size() const { return dp_size_; }
  [[nodiscard]] std::int64_t microbatches() const { return microbatches_; }
  [[nodiscard]] bool overlapped() const { return overlap_; }
  [[nodiscard]] CudaGpt& model() { return *gpt_; }

 private:
  // All-reduce (sum) and scale by 1 / DP `count` elements of the flat gradients from `offset`,
  // on the dp stream, timed as "dp".
  void reduce(std::int64_t offset, std::int64_t count);

  plan::Plan plan_;
  std::int64_t world_rank_ = 0, dp_rank_ = 0, dp_size_ = 1, microbatches_ = 1;
  bool overlap_ = false;
  int device_ = 0;  // set before any CUDA object below is made
  std::unique_ptr<CudaGpt> gpt_;
  std::unique_ptr<Stream> dp_stream_;
  std::unique_ptr<NcclGroup> dp_group_;  // a group of one when DP is 1
  std::unique_ptr<EventTimer> dp_timer_;
  // backward_done_ -> reduced_ on the compute stream: its wait for the dp stream.
  std::unique_ptr<Event> backward_done_, reduced_, grads_done_, dp_done_;
  double dp_exposed_ms_ = 0;
  std::int64_t adam_step_ = 0;
};

}  // namespace meshwork::exec::cuda
