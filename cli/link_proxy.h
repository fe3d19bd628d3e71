// LinkProxy: the delaying half of `hetps launch --links=netns` (cli/netns_links.h). The clients'
// namespaces reach the cluster through it, on the bridge's address: a connection from a
// client's address gets that client's latency, jitter and losses in each direction (the model
// of worker/link_shaper.h without its bandwidth, which tc tbf applies in the kernel), then goes
// on to 127.0.0.1 at the same port, where the scheduler or a server listens. A connection from
// any other address (the evaluator, tools) passes undelayed, as does every connection to a
// listener opened with delay = false (the scheduler: the transport mode does not delay control
// messages either). Bytes keep their order; a direction holding more than 8 MiB stops reading
// until it drains, so TCP's flow control reaches the sender. A lost packet holds its chunk one
// retransmission timeout, as in the transport mode, but its bytes do not take the link again.
//
// Thread-safety: Listen before Start, from one thread; the proxy then runs on its own thread
// until destroyed.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "worker/link_shaper.h"

namespace hetps {

class LinkProxy {
 public:
  // `clients`: IPv4 address (dotted) -> the link of the client there.
  explicit LinkProxy(std::map<std::string, LinkOptions> clients);
  ~LinkProxy();  // stops the thread, closes every connection
  LinkProxy(const LinkProxy&) = delete;
  LinkProxy& operator=(const LinkProxy&) = delete;

  // Listens on `address` at a free port and returns the port; connections are forwarded to
  // 127.0.0.1 at that port. REQUIRES: not started.
  StatusOr<int> Listen(const std::string& address, bool delay);
  Status Start();

  int64_t connections() const { return connections_.load(); }  // accepted so far

 private:
  void Loop();

  std::map<uint32_t, LinkOptions> clients_;  // by address, network byte order
  struct Listener {
    int fd;
    int port;
    bool delay;
  };
  std::vector<Listener> listeners_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> connections_{0};
  std::thread thread_;
};

}  // namespace hetps
