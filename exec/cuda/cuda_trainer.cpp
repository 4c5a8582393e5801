#include "exec/cuda/cuda_trainer.hpp"

#include <mpi.h>

#include <stdexcept>
#include <utility>

#include "exec/cuda/gpt_kernels.hpp"
#include "exec/cuda/nvtx.hpp"
#include "exec/cuda/unique_id.hpp"
#include "exec/executor_adamw.hpp"
#include "exec/synthetic_batch.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "plan/backend_limits.hpp"
#include "plan/derived.hpp"
#include "plan/rank_layout.hpp"

namespace meshwork::exec::cuda {

namespace {

struct NodePlace {
  int local_rank = 0, local_size = 1;
};

// This rank's place among the ranks sharing its node (MPI_COMM_TYPE_SHARED, MPI 4.0 §7.4.2).
NodePlace node_place(int world_rank) {
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
    throw std::runtime_error("CudaTrainer: MPI_Comm_split_type failed: cannot tell which ranks share this node");
  }
  NodePlace p;
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.local_size);
  MPI_Comm_free(&node);
  return p;
}

std::string text(std::int64_t v) { return std::to_string(v); }

}  // namespace

std::vector<std::string> CudaTrainer::unsupported(const plan::Plan& plan) {
  // One list of the backend's limits (plan/backend_limits), as `validate --backend cuda` says.
  std::vector<std::string> problems;
  const plan::Diagnostics limits = plan::backend_diagnostics(plan, plan::Backend::cuda);
  for (const auto& d : limits.items()) problems.push_back(d.path + ": " + d.message);
  return problems;
}

CudaTrainer::CudaTrainer(const plan::Plan& plan, CudaTrainerOptions options) : plan_(plan) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // No GPU first: on a machine without one, that is the whole answer, whatever the mesh.
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices < 1) {
    // Without a driver the runtime says "CUDA driver version is insufficient": say what it means.
    const std::string cause = e == cudaErrorInsufficientDriver ? ": no NVIDIA driver, or one older than this CUDA runtime"
                              : e != cudaSuccess              ? std::string(": ") + cudaGetErrorString(e)
                                                              : "";
    throw std::runtime_error("the CUDA backend found no CUDA device on rank " + text(rank) + cause);
  }
  const auto problems = unsupported(plan_);
  if (!problems.empty()) {
    std::string message = "the CUDA backend runs data parallelism only (the multi-dimension CUDA mesh is future work):";
    for (std::size_t i = 0; i < problems.size(); ++i) message += (i == 0 ? " " : "; ") + problems[i];
    throw std::invalid_argument(message);
  }
  world_rank_ = rank;
  const auto layout = plan::RankLayout::from_plan(plan_.parallelism);
  if (layout.world_size() != size) {
    throw std::invalid_argument("the plan has " + text(layout.world_size()) + " ranks (parallelism.data_parallel_size) and the job " + text(size) +
                                " processes");
  }
  // With every other dimension 1 the DP group is the world, in world-rank order.
  dp_rank_ = layout.dp_index(world_rank_);
  dp_size_ = size;
  microbatches_ = plan::derive(plan_).micro_batches_per_step;
  if (microbatches_ < 1) throw std::invalid_argument("training.global_batch_size gives no micro-batch per data-parallel rank");
  overlap_ = plan_.parallelism.overlap.grad_reduce;

  const NodePlace place = node_place(rank);
  if (dp_size_ > 1 && place.local_size > devices) {
    // NCCL refuses two members of one communicator on one device.
    throw std::invalid_argument("rank " + text(rank) + "'s node runs " + text(place.local_size) + " ranks and has " + text(devices) +
                                " GPUs: the CUDA backend needs one GPU per rank");
  }
  device_ = place.local_rank % devices;
  MESHWORK_CUDA_CHECK(cudaSetDevice(device_));

  gpt_ = std::make_unique<CudaGpt>(plan_.model, static_cast<std::uint64_t>(plan_.run.seed), kExecutorAdamW, true, options.attention);
  dp_stream_ = std::make_unique<Stream>();
  dp_timer_ = std::make_unique<EventTimer>(true);
  backward_done_ = std::make_unique<Event>(true);
  reduced_ = std::make_unique<Event>(true);
  grads_done_ = std::make_unique<Event>(false);
  dp_done_ = std::make_unique<Event>(false);
  {
    // DP 1 too: a group of one (NCCL's all-reduce is then a copy at most), so that one GPU
    // runs the whole path, buckets, streams and events, as the CPU trainer's LocalGroup does.
    NcclGroupOptions o;
    o.timeout_s = options.timeout_s;
    o.world_ranks = layout.group_members(plan::GroupKind::dp, world_rank_);
    o.on_timeout = std::move(options.on_timeout);
    const ncclUniqueId id = unique_id_over_mpi(MPI_COMM_WORLD, "dp", options.timeout_s);
    dp_group_ = std::make_unique<NcclGroup>("dp", id, static_cast<int>(dp_rank_), static_cast<int>(dp_size_), std::move(o));
  }
}

CudaTrainer::~CudaTrainer() = default;

void CudaTrainer::reduce(std::int64_t offset, std::int64_t count) {
  const cudaStream_t dp = dp_stream_->get();
  auto t = dp_timer_->scope("dp", dp);
  float* data = gpt_->grad_data() + offset;
  dp_group_->all_reduce_sum(data, static_cast<std::size_t>(count), dp);
  // The sum, then the mean, as the CPU trainer takes it.
  scale(data, 1.0F / static_cast<float>(dp_size_), count, dp);
}

double CudaTrainer::step(std::int64_t step, const std::function<void(CudaGpt&)>& before_update) {
  const cudaStream_t compute = gpt_->compute_stream(), dp = dp_stream_->get();
  double loss = 0;
  for (std::int64_t mb = 0; mb < microbatches_; ++mb) {
    if (overlap_ && mb + 1 == microbatches_) {
      // The last micro-batch completes each bucket: reduce it on the dp stream once its
      // last write on the compute stream is done.
      gpt_->set_grads_ready([this](const GradBucket& bucket, const Event& ready) {
        wait(dp_stream_->get(), ready);
        reduce(bucket.offset, bucket.count);
      });
    }
    const Batch batch = synthetic_batch(plan_, microbatches_, dp_rank_, step, mb);
    try {
      loss += gpt_->forward_backward(batch, 1.0 / static_cast<double>(microbatches_));
    } catch (...) {
      gpt_->set_grads_ready({});
      throw;
    }
    gpt_->set_grads_ready({});
  }
  backward_done_->record(compute);
  {
    NvtxRange range("grad_reduce");
    if (!overlap_) {
      grads_done_->record(compute);
      wait(dp, *grads_done_);
      reduce(0, gpt_->flat_size());
    }
    dp_done_->record(dp);
    wait(compute, *dp_done_);
  }
  reduced_->record(compute);
  // NCCL's errors and hung peers surface here, under the watchdog, before anything waits for
  // the device without a deadline.
  dp_group_->wait();
  if (before_update) before_update(*gpt_);
  gpt_->optimizer_step(++adam_step_);
  MESHWORK_CUDA_CHECK(cudaStreamSynchronize(compute));
  dp_exposed_ms_ += elapsed_ms(*backward_done_, *reduced_);
  (void)dp_timer_->collect();

  // The step's loss: micro-batch means averaged over micro-batches and DP ranks.
  double mine = loss / static_cast<double>(microbatches_ * dp_size_), total = 0;
  if (MPI_Allreduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS) {
    throw std::runtime_error("CudaTrainer: MPI_Allreduce of the step's loss failed");
  }
  return total;
}

std::map<std::string, double, std::less<>> CudaTrainer::op_ms() {
  auto ms = gpt_->op_ms();
  const auto& dp = dp_timer_->collect();
  const auto it = dp.find("dp");
  ms["dp"] = it == dp.end() ? 0.0 : it->second;
  ms["dp_exposed"] = dp_exposed_ms_;
  return ms;
}

}  // namespace meshwork::exec::cuda
