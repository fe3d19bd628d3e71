#include "common/connection_guard.h"

#include <fmt/format.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <map>
#include <utility>

namespace hetps {
namespace {

// The peer of descriptor `fd` as (host, host:port); empty when it is not a TCP peer (or gone).
std::pair<std::string, std::string> PeerOf(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {};
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return {};
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return {};
  }
  return {host, fmt::format("{}:{}", host, port)};
}

}  // namespace

class ConnectionGuard::Monitor : public zmq::monitor_t {
 public:
  Monitor(int per_address, std::string name, std::atomic<int64_t>& refused)
      : per_address_(per_address), name_(std::move(name)), refused_(refused) {}

  void on_event_accepted(const zmq_event_t& event, const char*) override {
    const int fd = event.value;
    auto [host, peer] = PeerOf(fd);
    if (host.empty()) return;
    const int open = ++open_[host];
    hosts_[fd] = host;
    if (open <= per_address_) return;
    // Still the connection this event is about: a descriptor closed and reused meanwhile has
    // another peer (another port, if not another host).
    if (PeerOf(fd).second != peer) return;
    shutdown(fd, SHUT_RDWR);
    const int64_t n = ++refused_;
    if (n <= 20 || n % 1000 == 0) {
      spdlog::warn(
          "{}: refused a connection from {}: {} open from that address, at most {} ({} "
          "refused so far)",
          name_, peer, open, per_address_, n);
    }
  }

  void on_event_disconnected(const zmq_event_t& event, const char*) override {
    auto it = hosts_.find(event.value);
    if (it == hosts_.end()) return;
    auto count = open_.find(it->second);
    if (count != open_.end() && --count->second <= 0) open_.erase(count);
    hosts_.erase(it);
  }

 private:
  const int per_address_;
  const std::string name_;
  std::atomic<int64_t>& refused_;
  std::map<std::string, int> open_;   // connections open, by host
  std::map<int, std::string> hosts_;  // descriptor -> the host it was counted for
};

ConnectionGuard::ConnectionGuard(zmq::socket_t& socket, int per_address, std::string name) {
  if (per_address <= 0) return;
  monitor_ = std::make_unique<Monitor>(per_address, std::move(name), refused_);
  monitor_->init(socket,
                 fmt::format("inproc://hetps-connection-guard-{}", static_cast<const void*>(this)),
                 ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED);
  thread_ = std::thread([this] { Run(); });
}

ConnectionGuard::~ConnectionGuard() {
  if (!monitor_) return;
  // The socket's monitor stops first, on its owner's thread, while the thread still reads: an
  // event ZeroMQ is sending then is never left blocked on a reader that is gone.
  monitor_->abort();
  stop_ = true;
  thread_.join();
  monitor_.reset();
}

void ConnectionGuard::Run() {
  while (!stop_.load()) monitor_->check_event(100);
}

}  // namespace hetps
