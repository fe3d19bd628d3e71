// The delaying proxy of --links=netns on loopback (no root needed): bytes come through whole and
// in order under jitter and losses, a client's address gets its latency each way, any other
// address passes undelayed.
#include "cli/link_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>

namespace hetps {
namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in Address(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// Echoes every connection on 127.0.0.1:port until the test ends.
class EchoServer {
 public:
  explicit EchoServer(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a = Address("127.0.0.1", port);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    thread_ = std::thread([this] {
      while (true) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        std::thread([c] {
          char buf[65536];
          ssize_t n;
          while ((n = recv(c, buf, sizeof(buf), 0)) > 0) {
            for (ssize_t sent = 0; sent < n;) {
              const ssize_t m = send(c, buf + sent, n - sent, MSG_NOSIGNAL);
              if (m <= 0) break;
              sent += m;
            }
          }
          close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }

 private:
  int fd_;
  std::thread thread_;
};

// A connection from `from` to the proxy at 127.0.0.2:port.
int Connect(const std::string& from, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local = Address(from, 0);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  sockaddr_in proxy = Address("127.0.0.2", port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&proxy), sizeof(proxy)), 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

std::string ReadExactly(int fd, size_t n) {
  std::string out;
  char buf[65536];
  while (out.size() < n) {
    const ssize_t m = recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
    if (m <= 0) break;
    out.append(buf, static_cast<size_t>(m));
  }
  return out;
}

// Seconds for one byte to go to the echo server and back.
double RoundTrip(int fd) {
  const auto start = Clock::now();
  EXPECT_EQ(send(fd, "x", 1, MSG_NOSIGNAL), 1);
  EXPECT_EQ(ReadExactly(fd, 1), "x");
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(LinkProxyTest, DelaysAClientsBytesEachWayAndKeepsThemWholeAndInOrder) {
  LinkProxy proxy({{"127.0.0.3", {.latency_ms = 30, .jitter_ms = 5, .loss = 0.02, .rto_ms = 50}}});
  auto port = proxy.Listen("127.0.0.2", /*delay=*/true);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  EchoServer echo(*port);
  ASSERT_TRUE(proxy.Start().ok());

  const int client = Connect("127.0.0.3", *port);
  const double rtt = RoundTrip(client);
  EXPECT_GE(rtt, 0.045) << "30 ms each way, jitter 5 ms";
  EXPECT_LT(rtt, 0.5);
  // 8 MB of random bytes, sent while they are echoed back: the same bytes in the same order.
  std::string data(8 << 20, '\0');
  std::mt19937 rng(7);
  for (char& c : data) c = static_cast<char>(rng());
  std::thread sender([&] {
    for (size_t sent = 0; sent < data.size();) {
      const ssize_t n = send(client, data.data() + sent,
                             std::min<size_t>(100000, data.size() - sent), MSG_NOSIGNAL);
      ASSERT_GT(n, 0);
      sent += static_cast<size_t>(n);
    }
  });
  const std::string back = ReadExactly(client, data.size());
  sender.join();
  EXPECT_TRUE(back == data) << "got " << back.size() << " bytes, not the ones sent";

  // Another address passes undelayed.
  const int other = Connect("127.0.0.4", *port);
  EXPECT_LT(RoundTrip(other), 0.02);
  close(other);
  close(client);
  EXPECT_EQ(proxy.connections(), 2);
}

TEST(LinkProxyTest, AListenerWithoutDelayPassesEveryoneUndelayed) {
  LinkProxy proxy({{"127.0.0.3", {.latency_ms = 100}}});
  auto port = proxy.Listen("127.0.0.2", /*delay=*/false);
  ASSERT_TRUE(port.ok());
  EchoServer echo(*port);
  ASSERT_TRUE(proxy.Start().ok());
  const int client = Connect("127.0.0.3", *port);
  EXPECT_LT(RoundTrip(client), 0.05);
  close(client);
}

TEST(LinkProxyTest, AConnectionToAPortNobodyServesIsClosed) {
  LinkProxy proxy({});
  EXPECT_FALSE(proxy.Listen("not an address", true).ok());
  auto port = proxy.Listen("127.0.0.2", true);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(proxy.Start().ok());
  const int client = Connect("127.0.0.3", *port);
  char c;
  EXPECT_LE(recv(client, &c, 1, 0), 0);  // closed (or reset), not left hanging
  close(client);
}

}  // namespace
}  // namespace hetps
