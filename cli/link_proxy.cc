#include "cli/link_proxy.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

namespace hetps {
namespace {

constexpr size_t kMaxQueued = 8 << 20;  // per direction, before reading stops
constexpr size_t kReadBytes = 64 << 10;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status Errno(const std::string& what) {
  return Status::Unavailable(fmt::format("{}: {}", what, std::strerror(errno)));
}

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

struct Chunk {
  double release;
  std::string bytes;  // empty: the end of the stream (passed on as a FIN)
  size_t sent = 0;
};

// One direction of a connection: read from `from`, held until each chunk's release, written
// to `to`.
struct Direction {
  int from = -1;
  int to = -1;
  bool up = true;  // client -> server
  std::deque<Chunk> queue;
  size_t queued = 0;
  bool eof = false;      // `from` reached its end
  bool done = false;     // ... and that end was passed on
  bool blocked = false;  // `to` took no more: wait for it to drain (EPOLLOUT), not for time
};

struct Connection {
  std::optional<LinkShaper> shaper;  // none: undelayed
  Direction up, down;
  bool failed = false;
};

// Reads what `d.from` has (while the queue has room), stamping each chunk with its release.
void Read(Connection& c, Direction& d, double now) {
  char buf[kReadBytes];
  while (!d.eof && d.queued < kMaxQueued) {
    const ssize_t n = recv(d.from, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) {
      c.failed = true;
      return;
    }
    double release = now;
    if (c.shaper && n > 0) {
      release = d.up ? c.shaper->Up(static_cast<size_t>(n), now)
                     : c.shaper->Down(static_cast<size_t>(n), now);
    }
    if (!d.queue.empty()) release = std::max(release, d.queue.back().release);
    if (n == 0) {
      d.eof = true;
      d.queue.push_back({release, {}});
      return;
    }
    d.queue.push_back({release, std::string(buf, static_cast<size_t>(n))});
    d.queued += static_cast<size_t>(n);
  }
}

// Writes the chunks whose time has come, as far as `d.to` takes them.
void Write(Connection& c, Direction& d, double now) {
  d.blocked = false;
  while (!d.queue.empty() && d.queue.front().release <= now) {
    Chunk& chunk = d.queue.front();
    if (chunk.bytes.empty()) {
      shutdown(d.to, SHUT_WR);
      d.done = true;
      d.queue.pop_front();
      return;
    }
    const ssize_t n =
        send(d.to, chunk.bytes.data() + chunk.sent, chunk.bytes.size() - chunk.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      d.blocked = true;
      return;
    }
    if (n < 0) {
      c.failed = true;
      return;
    }
    chunk.sent += static_cast<size_t>(n);
    d.queued -= static_cast<size_t>(n);
    if (chunk.sent == chunk.bytes.size()) d.queue.pop_front();
  }
}

// When the next held chunk of `d` is due (infinity when none waits on time).
double NextRelease(const Direction& d) {
  return d.queue.empty() || d.blocked ? 1e300 : d.queue.front().release;
}

}  // namespace

LinkProxy::LinkProxy(std::map<std::string, LinkOptions> clients) {
  for (const auto& [address, link] : clients) {
    in_addr a{};
    if (inet_pton(AF_INET, address.c_str(), &a) == 1) clients_[a.s_addr] = link;
  }
}

LinkProxy::~LinkProxy() {
  stop_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  for (const Listener& l : listeners_) close(l.fd);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

StatusOr<int> LinkProxy::Listen(const std::string& address, bool delay) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
    return Status::InvalidArgument("not an IPv4 address: " + address);
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 256) != 0) {
    Status s = Errno("cannot listen on " + address);
    close(fd);
    return s;
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  listeners_.push_back({fd, ntohs(a.sin_port), delay});
  return static_cast<int>(ntohs(a.sin_port));
}

Status LinkProxy::Start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return Errno("epoll");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  for (const Listener& l : listeners_) {
    ev.data.fd = l.fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, l.fd, &ev) != 0) return Errno("epoll_ctl");
  }
  thread_ = std::thread([this] { Loop(); });
  return Status();
}

namespace {

// The proxy's thread: its connections, each served when its sockets are ready or what it holds
// is due.
class ProxyLoop {
 public:
  ProxyLoop(int epoll_fd, const std::map<uint32_t, LinkOptions>& clients,
            std::atomic<int64_t>& connections)
      : epoll_fd_(epoll_fd), clients_(clients), connections_(connections) {}
  ~ProxyLoop() {
    for (const auto& c : all_) {
      close(c->up.from);
      close(c->down.from);
    }
  }

  // Accepts every waiting connection on `fd` and dials its target on 127.0.0.1:`port`; with
  // `delay`, a client with a link gets its delay (its bandwidth is tc's).
  void Accept(int fd, int port, bool delay);
  // Moves what can move in both directions; closes a connection that is done or failed.
  void Service(const std::shared_ptr<Connection>& c, double now);
  // How long epoll may wait: until the first held bytes are due (-1: none held).
  int TimeoutMs() const;
  // The connections of `events`, and those whose held bytes are due.
  std::set<std::shared_ptr<Connection>> Ready(const std::vector<int>& fds, double now) const;

 private:
  const int epoll_fd_;
  const std::map<uint32_t, LinkOptions>& clients_;
  std::atomic<int64_t>& connections_;
  std::unordered_map<int, std::shared_ptr<Connection>> by_fd_;
  std::set<std::shared_ptr<Connection>> all_;
  uint64_t accepted_ = 0;
};

void ProxyLoop::Accept(int fd, int port, bool delay) {
  while (true) {
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    const int client =
        accept4(fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) return;  // EAGAIN, or a connection that went away meanwhile
    const int server = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in target{};
    target.sin_family = AF_INET;
    target.sin_port = htons(static_cast<uint16_t>(port));
    target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (server < 0 || (connect(server, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0 &&
                       errno != EINPROGRESS)) {
      close(client);  // nobody listens there (yet): the client's transport retries
      if (server >= 0) close(server);
      continue;
    }
    NoDelay(client);
    NoDelay(server);
    auto c = std::make_shared<Connection>();
    if (auto it = clients_.find(peer.sin_addr.s_addr); delay && it != clients_.end()) {
      LinkOptions link = it->second;
      link.up_mbps = link.down_mbps = 0;  // tc tbf limits the bandwidth
      link.seed = link.seed * 7919 + ++accepted_;
      c->shaper.emplace(link);
    }
    c->up.from = c->down.to = client;
    c->up.to = c->down.from = server;
    c->down.up = false;
    for (int end : {client, server}) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.fd = end;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, end, &ev);
      by_fd_[end] = c;
    }
    all_.insert(c);
    ++connections_;
  }
}

void ProxyLoop::Service(const std::shared_ptr<Connection>& c, double now) {
  for (Direction* d : {&c->up, &c->down}) {
    Read(*c, *d, now);
    Write(*c, *d, now);
    // Reading stopped at the queue's limit resumes once writing made room.
    if (!c->failed && !d->eof && d->queued < kMaxQueued) Read(*c, *d, now);
  }
  if (c->failed || (c->up.done && c->down.done)) {
    for (int fd : {c->up.from, c->down.from}) {
      by_fd_.erase(fd);
      close(fd);
    }
    all_.erase(c);
  }
}

int ProxyLoop::TimeoutMs() const {
  double next = 1e300;
  for (const auto& c : all_) next = std::min({next, NextRelease(c->up), NextRelease(c->down)});
  if (next >= 1e300) return -1;
  return static_cast<int>(std::clamp((next - Now()) * 1000 + 0.999, 0.0, 1000.0));
}

std::set<std::shared_ptr<Connection>> ProxyLoop::Ready(const std::vector<int>& fds,
                                                       double now) const {
  std::set<std::shared_ptr<Connection>> ready;
  for (int fd : fds) {
    if (auto c = by_fd_.find(fd); c != by_fd_.end()) ready.insert(c->second);
  }
  for (const auto& c : all_) {
    if (std::min(NextRelease(c->up), NextRelease(c->down)) <= now) ready.insert(c);
  }
  return ready;
}

}  // namespace

void LinkProxy::Loop() {
  std::unordered_map<int, const Listener*> listeners;
  for (const Listener& l : listeners_) listeners[l.fd] = &l;
  ProxyLoop loop(epoll_fd_, clients_, connections_);
  std::vector<epoll_event> events(256);
  while (!stop_) {
    const int n =
        epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), loop.TimeoutMs());
    if (n < 0 && errno != EINTR) break;
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) continue;
      if (auto l = listeners.find(fd); l != listeners.end()) {
        loop.Accept(fd, l->second->port, l->second->delay);
      } else {
        fds.push_back(fd);
      }
    }
    const double now = Now();
    for (const auto& c : loop.Ready(fds, now)) loop.Service(c, now);
  }
}

}  // namespace hetps
