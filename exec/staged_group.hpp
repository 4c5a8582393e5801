#pragma once
// A host group serving a device backend (issue 23's mixed backends): the CUDA backend's
// chunks with the CPU backend's MpiGroup, each float tensor copied to the host, exchanged, and
// copied back through the backend. NCCL refuses two ranks on one GPU, so this is how
// `mpirun -np 4` on one GPU runs a TP2 x PP2, CP2 or EP2 mesh against the CPU reference.
// Integer and double spans are the host's already and pass straight through.

#include <memory>

#include "exec/backend.hpp"
#include "exec/group.hpp"

namespace meshwork::exec {

class StagedGroup final : public Group {
 public:
  // `host` exchanges host memory; `backend` copies between its memory and the host's and
  // must outlive the group.
  StagedGroup(std::unique_ptr<Group> host, Backend& backend) : host_(std::move(host)), backend_(backend) {}

  [[nodiscard]] int size() const override { return host_->size(); }
  [[nodiscard]] int rank() const override { return host_->rank(); }
  [[nodiscard]] std::int64_t world_rank(int member) const override { return host_->world_rank(member); }
  [[nodiscard]] const std::string& name() const override { return host_->name(); }

  void all_reduce_sum(std::span<float> data) override;
  void all_reduce_sum(std::span<double> data) override;
  void all_reduce_max(std::span<float> data) override;
  void broadcast(int root, std::span<float> data) override;
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override;
  void all_gather(std::span<const float> in, std::span<float> out) override;
  void all_gather(std::span<const std::uint64_t> in, std::span<std::uint64_t> out) override;
  void all_to_all_v(std::span<const float> send, std::span<const int> send_counts, std::span<float> recv, std::span<const int> recv_counts) override;
  void all_to_all(std::span<const std::int64_t> in, std::span<std::int64_t> out) override;
  void send(int to, int tag, std::span<const float> data) override;
  void recv(int from, int tag, std::span<float> data) override;
  void flush() override;

 private:
  // Runs `op` on the host group and adds what it recorded, and the copies' time, to this
  // group's figures.
  template <class Op>
  void timed(Op&& op);
  [[nodiscard]] std::vector<float> down(std::span<const float> device);

  std::unique_ptr<Group> host_;
  Backend& backend_;
};

}  // namespace meshwork::exec
