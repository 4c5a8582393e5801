#include "exec/cuda/tcp_store.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace meshwork::exec::cuda {

namespace {

using Clock = std::chrono::steady_clock;

// How long the server waits for the rest of a request once a client has connected: clients
// send the whole request at once, so this only bounds how long a stuck client can hold the
// serving thread.
constexpr std::chrono::seconds kRequestTimeout{5};

// Wire format: request = op byte ('S' set, 'G' get), key length (u32, network order), key,
// and for a set the value length (u32) and value; answer to a set = 'K', to a get = the value
// length (u32) and value.
constexpr char kSet = 'S', kGet = 'G', kSetDone = 'K';

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message() + " (errno " + std::to_string(e) + ")"; }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string where(const std::string& host, std::uint16_t port) {
  return "tcp store " + (host.empty() ? std::string("*") : host) + ":" + std::to_string(port);
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_ = -1;
};

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfo = std::unique_ptr<addrinfo, AddrInfoDeleter>;

std::string gai_text(int rc) {
  std::string text = std::string("getaddrinfo: ") + gai_strerror(rc);
  if (rc == EAI_SYSTEM) text += ": " + errno_text(errno);
  return text;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

void send_all(int fd, const void* data, std::size_t bytes, const std::string& context) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);  // no SIGPIPE if the peer is gone
    if (n < 0) {
      if (errno == EINTR) continue;
      throw TcpStoreError(context + ": send: " + errno_text(errno));
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

// Reads exactly `bytes`, or throws when the deadline passes first (`waiting_for` says what
// for) or the peer closes the connection.
void recv_all(int fd, void* data, std::size_t bytes, Clock::time_point deadline, double timeout_s, const std::string& context, const std::string& waiting_for) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, remaining_ms(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      throw TcpStoreError(context + ": poll: " + errno_text(errno));
    }
    if (ready == 0) throw TcpStoreError(context + ": timed out after " + seconds_text(timeout_s) + " s waiting for " + waiting_for);
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw TcpStoreError(context + ": recv: " + errno_text(errno));
    }
    if (n == 0) throw TcpStoreError(context + ": the connection was closed while waiting for " + waiting_for);
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void send_u32(int fd, std::uint32_t v, const std::string& context) {
  const std::uint32_t wire = htonl(v);
  send_all(fd, &wire, sizeof wire, context);
}

std::uint32_t recv_u32(int fd, Clock::time_point deadline, double timeout_s, const std::string& context, const std::string& waiting_for) {
  std::uint32_t wire = 0;
  recv_all(fd, &wire, sizeof wire, deadline, timeout_s, context, waiting_for);
  return ntohl(wire);
}

void send_value(int fd, std::span<const std::byte> value, const std::string& context) {
  send_u32(fd, static_cast<std::uint32_t>(value.size()), context);
  if (!value.empty()) send_all(fd, value.data(), value.size(), context);
}

// One non-blocking connect attempt to `ai`, bounded by the deadline. Returns the connected
// socket, or an invalid Fd with `error` set.
Fd try_connect(const addrinfo& ai, Clock::time_point deadline, std::string& error) {
  Fd fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai.ai_protocol));
  if (fd.get() < 0) {
    error = "socket: " + errno_text(errno);
    return {};
  }
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      error = "connect: " + errno_text(errno);
      return {};
    }
    pollfd pfd{fd.get(), POLLOUT, 0};
    int ready = 0;
    do {
      ready = ::poll(&pfd, 1, remaining_ms(deadline));
    } while (ready < 0 && errno == EINTR);
    if (ready < 0) {
      error = "poll: " + errno_text(errno);
      return {};
    }
    if (ready == 0) {
      error = "connect: no answer before the deadline";
      return {};
    }
    int so_error = 0;
    socklen_t len = sizeof so_error;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) {
      error = "getsockopt(SO_ERROR): " + errno_text(errno);
      return {};
    }
    if (so_error != 0) {
      error = "connect: " + errno_text(so_error);
      return {};
    }
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    error = "fcntl(O_NONBLOCK): " + errno_text(errno);
    return {};
  }
  const int one = 1;  // requests are tiny: send them at once
  if (ai.ai_family == AF_INET || ai.ai_family == AF_INET6) {
    if (::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
      error = "setsockopt(TCP_NODELAY): " + errno_text(errno);
      return {};
    }
  }
  return fd;
}

// Connects to the store, retrying (10 ms, doubling to 1 s between attempts) while it is not up
// yet, until the deadline.
Fd connect_with_retry(const std::string& host, std::uint16_t port, Clock::time_point deadline, double timeout_s) {
  const std::string context = where(host, port);
  const std::string port_text = std::to_string(port);
  std::string last_error = "no attempt";
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
    if (rc != 0) {
      last_error = gai_text(rc);
      // A name that does not resolve will not start resolving; a busy resolver might.
      if (rc != EAI_AGAIN) throw TcpStoreError(context + ": " + last_error);
    } else {
      const AddrInfo list(found);
      for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
        Fd fd = try_connect(*ai, deadline, last_error);
        if (fd.get() >= 0) return fd;
      }
    }
    if (Clock::now() >= deadline) {
      throw TcpStoreError(context + ": could not connect within " + seconds_text(timeout_s) + " s (is the store's process alive, and the port right?); last error: " + last_error);
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

void check_key(std::string_view key, const std::string& context) {
  if (key.empty() || key.size() > kTcpStoreMaxKeyBytes) {
    throw TcpStoreError(context + ": a key must have 1 to " + std::to_string(kTcpStoreMaxKeyBytes) + " bytes, '" + std::string(key.substr(0, 64)) + "' has " + std::to_string(key.size()));
  }
}

void send_request(int fd, char op, std::string_view key, const std::string& context) {
  send_all(fd, &op, 1, context);
  send_u32(fd, static_cast<std::uint32_t>(key.size()), context);
  send_all(fd, key.data(), key.size(), context);
}

Clock::time_point deadline_after(double timeout_s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.0, timeout_s)));
}

}  // namespace

void tcp_store_set(const std::string& host, std::uint16_t port, std::string_view key, std::span<const std::byte> value, double timeout_s) {
  const std::string context = where(host, port);
  check_key(key, context);
  if (value.size() > kTcpStoreMaxValueBytes) throw TcpStoreError(context + ": a value of " + std::to_string(value.size()) + " bytes is over the store's limit");
  const auto deadline = deadline_after(timeout_s);
  const Fd fd = connect_with_retry(host, port, deadline, timeout_s);
  send_request(fd.get(), kSet, key, context);
  send_value(fd.get(), value, context);
  char ack = 0;
  recv_all(fd.get(), &ack, 1, deadline, timeout_s, context, "the store to acknowledge key '" + std::string(key) + "'");
  if (ack != kSetDone) throw TcpStoreError(context + ": unexpected answer to setting key '" + std::string(key) + "'");
}

std::vector<std::byte> tcp_store_get(const std::string& host, std::uint16_t port, std::string_view key, double timeout_s) {
  const std::string context = where(host, port);
  check_key(key, context);
  const auto deadline = deadline_after(timeout_s);
  const Fd fd = connect_with_retry(host, port, deadline, timeout_s);
  send_request(fd.get(), kGet, key, context);
  const std::string waiting_for = "key '" + std::string(key) + "' (its setter never set it: hung, dead or not started)";
  const std::uint32_t size = recv_u32(fd.get(), deadline, timeout_s, context, waiting_for);
  if (size > kTcpStoreMaxValueBytes) throw TcpStoreError(context + ": the value of key '" + std::string(key) + "' claims " + std::to_string(size) + " bytes");
  std::vector<std::byte> value(size);
  if (size > 0) recv_all(fd.get(), value.data(), size, deadline, timeout_s, context, waiting_for);
  return value;
}

// The serving thread owns the values and the parked gets; only `error` is shared.
struct TcpStoreServer::State {
  std::string bind_host;
  std::uint16_t port = 0;
  Fd listen_fd, wake_read, wake_write;
  std::thread thread;
  mutable std::mutex mutex;
  std::string error;
  std::map<std::string, std::vector<std::byte>, std::less<>> values;
  std::map<std::string, std::vector<Fd>, std::less<>> waiting;  // gets parked until their key is set

  void serve();
  void handle(Fd client);
  void stop_with(const std::string& message) {
    const std::lock_guard lock(mutex);
    error = message;
  }
};

TcpStoreServer::TcpStoreServer(const std::string& bind_host, std::uint16_t port) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.bind_host = bind_host;
  const std::string context = where(bind_host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  const int rc = ::getaddrinfo(bind_host.empty() ? nullptr : bind_host.c_str(), port_text.c_str(), &hints, &found);
  if (rc != 0) throw TcpStoreError(context + ": " + gai_text(rc));
  const AddrInfo list(found);
  std::string last_error = "no address to listen on";
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      last_error = "socket: " + errno_text(errno);
      continue;
    }
    // A restarted job may find the port in TIME_WAIT from the last one (Stevens, UNIX Network
    // Programming vol. 1, 7.5): reuse it.
    const int one = 1, zero = 0;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
      last_error = "setsockopt(SO_REUSEADDR): " + errno_text(errno);
      continue;
    }
    // The IPv6 wildcard takes IPv4 clients too.
    if (ai->ai_family == AF_INET6 && ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) != 0) {
      last_error = "setsockopt(IPV6_V6ONLY): " + errno_text(errno);
      continue;
    }
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = "bind: " + errno_text(errno);
      continue;
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) {
      last_error = "listen: " + errno_text(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      last_error = "getsockname: " + errno_text(errno);
      continue;
    }
    s.port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    s.listen_fd = std::move(fd);
    break;
  }
  if (s.listen_fd.get() < 0) throw TcpStoreError(context + ": cannot listen: " + last_error);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw TcpStoreError(context + ": pipe2: " + errno_text(errno));
  s.wake_read = Fd(pipe_fds[0]);
  s.wake_write = Fd(pipe_fds[1]);
  s.thread = std::thread([&s] { s.serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char stop = 0;
  while (::write(state_->wake_write.get(), &stop, 1) < 0 && errno == EINTR) {
  }
  state_->thread.join();
}

std::uint16_t TcpStoreServer::port() const { return state_->port; }

std::string TcpStoreServer::error() const {
  const std::lock_guard lock(state_->mutex);
  return state_->error;
}

void TcpStoreServer::State::serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd.get(), POLLIN, 0}, {wake_read.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      stop_with(where(bind_host, port) + ": poll: " + errno_text(errno));
      return;
    }
    if (fds[1].revents != 0) return;  // the destructor
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int client = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      // A client that gave up between poll and accept, or a signal: keep serving.
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN || errno == EWOULDBLOCK || errno == EPROTO) continue;
      stop_with(where(bind_host, port) + ": accept: " + errno_text(errno));
      return;
    }
    try {
      handle(Fd(client));
    } catch (const TcpStoreError&) {
      // That client's request was malformed or it went away: its connection is closed and it
      // reports the failure itself. The store serves on.
    }
  }
}

void TcpStoreServer::State::handle(Fd client) {
  const auto deadline = Clock::now() + kRequestTimeout;
  const double timeout_s = std::chrono::duration<double>(kRequestTimeout).count();
  const std::string context = where(bind_host, port);
  const int fd = client.get();
  char op = 0;
  recv_all(fd, &op, 1, deadline, timeout_s, context, "a request");
  const std::uint32_t key_size = recv_u32(fd, deadline, timeout_s, context, "a key");
  if (key_size == 0 || key_size > kTcpStoreMaxKeyBytes) throw TcpStoreError(context + ": bad key length");
  std::string key(key_size, '\0');
  recv_all(fd, key.data(), key_size, deadline, timeout_s, context, "a key");
  if (op == kSet) {
    const std::uint32_t size = recv_u32(fd, deadline, timeout_s, context, "a value");
    if (size > kTcpStoreMaxValueBytes) throw TcpStoreError(context + ": value over the limit");
    std::vector<std::byte> value(size);
    if (size > 0) recv_all(fd, value.data(), size, deadline, timeout_s, context, "a value");
    send_all(fd, &kSetDone, 1, context);
    if (const auto parked = waiting.find(key); parked != waiting.end()) {
      for (const Fd& getter : parked->second) {
        try {
          send_value(getter.get(), value, context);
        } catch (const TcpStoreError&) {
          // That getter timed out and left; the others still get the value.
        }
      }
      waiting.erase(parked);
    }
    values[key] = std::move(value);
  } else if (op == kGet) {
    if (const auto v = values.find(key); v != values.end()) {
      send_value(fd, v->second, context);
    } else {
      waiting[key].push_back(std::move(client));
    }
  } else {
    throw TcpStoreError(context + ": unknown request");
  }
}

}  // namespace meshwork::exec::cuda
