#pragma once
// A minimal TCP key-value store for a job's rendezvous without MPI: how the members of each
// NCCL communicator receive its 128-byte ncclUniqueId from the member that created it. One
// process of the job (world rank 0, on MASTER_ADDR) runs a TcpStoreServer on MASTER_PORT; a
// group's member 0 sets a key named after the group ("tp/3"), the other members get it,
// waiting until it is set, so several groups use one store one after another or at once.
// Clients retry their connection until a deadline (the server may start later than they do),
// and every failure names the address, the port and the system's error text.
// Plain POSIX sockets and no CUDA header, so that its tests run in CPU-only CI.
//
// Under torchrun, MASTER_PORT may already be taken by torchrun's own store (its agent serves
// one there); pass another port (MASTER_PORT + 1, say) to both sides then.

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meshwork::exec::cuda {

class TcpStoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Limits of one request, against a stray client sending garbage.
inline constexpr std::size_t kTcpStoreMaxKeyBytes = 1024;
inline constexpr std::size_t kTcpStoreMaxValueBytes = std::size_t{1} << 20;

// Serves the store from a thread of its own until destroyed. Throws TcpStoreError if it cannot
// listen on bind_host:port (empty bind_host: every interface; port 0: an ephemeral port,
// see port()).
class TcpStoreServer {
 public:
  TcpStoreServer(const std::string& bind_host, std::uint16_t port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  [[nodiscard]] std::uint16_t port() const;
  // The first error that stopped the serving thread, empty while it runs.
  [[nodiscard]] std::string error() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Client calls. Each connects to host:port (retrying refused or unreachable connections until
// the deadline), sends one request and waits for the answer within what is left of timeout_s.
void tcp_store_set(const std::string& host, std::uint16_t port, std::string_view key, std::span<const std::byte> value, double timeout_s);
// Waits until `key` is set and returns its value.
[[nodiscard]] std::vector<std::byte> tcp_store_get(const std::string& host, std::uint16_t port, std::string_view key, double timeout_s);

}  // namespace meshwork::exec::cuda
