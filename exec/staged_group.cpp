#include "exec/staged_group.hpp"

#include <chrono>
#include <vector>

namespace meshwork::exec {

template <class Op>
void StagedGroup::timed(Op&& op) {
  const auto t0 = std::chrono::steady_clock::now();
  const GroupStats before = host_->stats();
  op();
  const GroupStats& after = host_->stats();
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.recv_seconds += after.recv_seconds - before.recv_seconds;
  stats_.bytes += after.bytes - before.bytes;
  stats_.calls += after.calls - before.calls;
  stats_.wrong += after.wrong - before.wrong;
}

std::vector<float> StagedGroup::down(std::span<const float> device) {
  std::vector<float> host(device.size());
  backend_.to_host(device, host);
  return host;
}

void StagedGroup::all_reduce_sum(std::span<float> data) {
  timed([&] {
    std::vector<float> h = down(data);
    host_->all_reduce_sum(h);
    backend_.from_host(h, data);
  });
}
void StagedGroup::all_reduce_sum(std::span<double> data) {
  timed([&] { host_->all_reduce_sum(data); });
}
void StagedGroup::all_reduce_max(std::span<float> data) {
  timed([&] {
    std::vector<float> h = down(data);
    host_->all_reduce_max(h);
    backend_.from_host(h, data);
  });
}
void StagedGroup::broadcast(int root, std::span<float> data) {
  timed([&] {
    std::vector<float> h = down(data);
    host_->broadcast(root, h);
    backend_.from_host(h, data);
  });
}
void StagedGroup::reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  timed([&] {
    const std::vector<float> h = down(in);
    std::vector<float> r(out.size());
    host_->reduce_scatter_sum(h, r);
    backend_.from_host(r, out);
  });
}
void StagedGroup::all_gather(std::span<const float> in, std::span<float> out) {
  timed([&] {
    const std::vector<float> h = down(in);
    std::vector<float> r(out.size());
    host_->all_gather(h, r);
    backend_.from_host(r, out);
  });
}
void StagedGroup::all_gather(std::span<const std::uint64_t> in, std::span<std::uint64_t> out) {
  timed([&] { host_->all_gather(in, out); });
}
void StagedGroup::all_to_all_v(std::span<const float> send, std::span<const int> send_counts, std::span<float> recv, std::span<const int> recv_counts) {
  timed([&] {
    const std::vector<float> h = down(send);
    std::vector<float> r(recv.size());
    host_->all_to_all_v(h, send_counts, r, recv_counts);
    backend_.from_host(r, recv);
  });
}
void StagedGroup::all_to_all(std::span<const std::int64_t> in, std::span<std::int64_t> out) {
  timed([&] { host_->all_to_all(in, out); });
}
void StagedGroup::send(int to, int tag, std::span<const float> data) {
  timed([&] { host_->send(to, tag, down(data)); });  // the host group keeps its own copy
}
void StagedGroup::recv(int from, int tag, std::span<float> data) {
  timed([&] {
    std::vector<float> h(data.size());
    host_->recv(from, tag, h);
    backend_.from_host(h, data);
  });
}
void StagedGroup::flush() {
  timed([&] { host_->flush(); });
}

}  // namespace meshwork::exec
