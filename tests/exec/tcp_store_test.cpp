// The TCP store that hands NCCL's unique ids around without MPI, on the loopback interface:
// no GPU, no second process.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>

#include "exec/cuda/tcp_store.hpp"

namespace meshwork::exec::cuda {
namespace {

std::vector<std::byte> id_bytes(int seed) {
  std::vector<std::byte> v(128);  // NCCL_UNIQUE_ID_BYTES
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>((i * 7 + static_cast<std::size_t>(seed)) & 0xff);
  return v;
}

// A port nothing listens on: bound once (ephemeral), then closed.
std::uint16_t closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(TcpStore, OneSetsAnotherGetsTheSameBytes) {
  TcpStoreServer server("127.0.0.1", 0);
  ASSERT_NE(server.port(), 0);
  const auto id = id_bytes(3);
  std::vector<std::byte> got;
  // The getter starts first: it waits for the key.
  std::thread getter([&] { got = tcp_store_get("127.0.0.1", server.port(), "tp/3", 10); });
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    tcp_store_set("127.0.0.1", server.port(), "tp/3", id, 10);
  });
  setter.join();
  getter.join();
  EXPECT_EQ(got, id);
  EXPECT_EQ(server.error(), "");
}

TEST(TcpStore, SeveralGroupsShareOneStore) {
  TcpStoreServer server("127.0.0.1", 0);
  const std::array<const char*, 3> keys = {"tp/0", "tp/1", "dp/0"};
  for (std::size_t i = 0; i < keys.size(); ++i) tcp_store_set("127.0.0.1", server.port(), keys[i], id_bytes(static_cast<int>(i)), 10);
  for (int reader = 0; reader < 2; ++reader) {
    for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(tcp_store_get("127.0.0.1", server.port(), keys[i], 10), id_bytes(static_cast<int>(i)));
  }
}

TEST(TcpStore, ClientStartedBeforeTheServerRetries) {
  const std::uint16_t port = closed_port();
  std::vector<std::byte> got;
  std::thread getter([&] { got = tcp_store_get("127.0.0.1", port, "pp/0", 20); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  TcpStoreServer server("127.0.0.1", port);
  tcp_store_set("127.0.0.1", port, "pp/0", id_bytes(9), 10);
  getter.join();
  EXPECT_EQ(got, id_bytes(9));
}

TEST(TcpStore, ConnectToAClosedPortTimesOutNamingThePort) {
  const std::uint16_t port = closed_port();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)tcp_store_get("127.0.0.1", port, "tp/0", 0.5);
    FAIL() << "no error";
  } catch (const TcpStoreError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << what;
    EXPECT_NE(what.find("could not connect within 0.5 s"), std::string::npos) << what;
    EXPECT_NE(what.find("refused"), std::string::npos) << what;
  }
  const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited_s, 0.5);
  EXPECT_LT(waited_s, 5.0);
}

TEST(TcpStore, AKeyNeverSetTimesOutNamingTheKey) {
  TcpStoreServer server("127.0.0.1", 0);
  try {
    (void)tcp_store_get("127.0.0.1", server.port(), "dp/7", 0.3);
    FAIL() << "no error";
  } catch (const TcpStoreError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'dp/7'"), std::string::npos) << e.what();
  }
  // The store still serves after a getter gave up.
  tcp_store_set("127.0.0.1", server.port(), "dp/7", id_bytes(1), 10);
  EXPECT_EQ(tcp_store_get("127.0.0.1", server.port(), "dp/7", 10), id_bytes(1));
}

TEST(TcpStore, APortInUseIsAnError) {
  TcpStoreServer first("127.0.0.1", 0);
  try {
    TcpStoreServer second("127.0.0.1", first.port());
    FAIL() << "no error";
  } catch (const TcpStoreError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bind"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshwork::exec::cuda
