#include "bench/flood.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <zmq.hpp>

#include "bench/bench_cluster.h"
#include "common/message.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kElements = 1 << 20;  // a 4 MiB tensor, 4 partitions of 1 MiB

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : -1;
}

// A figure of /proc/<pid>/status in MiB (`field`: "VmRSS:", "RssShmem:"), or -1.
double StatusMib(pid_t pid, const char* field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  const size_t n = std::strlen(field);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(n)) / 1024.0;
  }
  return -1;
}
double RssMib(pid_t pid) { return StatusMib(pid, "VmRSS:"); }

// The descriptors process `pid` holds open (its connections among them), or -1.
int OpenFiles(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

// The legitimate worker: push a gradient of ones, then pull, until `stop`; every value pulled
// must be minus the number of pushes so far (sgd, lr 1, zeros). Returns GB/s moved (push and
// pull), or -1 on an error or a wrong value.
double Legitimate(Client& client, int64_t& pushes, const std::atomic<bool>& stop, double seconds) {
  std::vector<float> grad(kElements, 1.0f), values(kElements);
  const auto start = Clock::now();
  int64_t bytes = 0;
  while (!stop.load() && std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    if (!client.Push("t", grad.data(), kElements).Wait().ok()) return -1;
    ++pushes;
    if (!client.Pull("t", values.data(), kElements).Wait().ok()) return -1;
    for (float v : values) {
      if (v != -static_cast<float>(pushes)) return -1;
    }
    bytes += 2 * kElements * static_cast<int64_t>(sizeof(float));
  }
  return bytes / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
}

// A peer that sends random frames and random headers and never reads a reply.
void Junk(const std::string& endpoint, uint32_t seed, const std::atomic<bool>& stop,
          std::atomic<int64_t>& sent) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndtimeo, 100);
  s.connect(endpoint);
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(64 << 10);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  while (!stop.load()) {
    const size_t n = 1 + rng() % bytes.size();
    bool ok;
    if (rng() % 2 == 0) {
      ok = s.send(zmq::buffer(bytes.data() + rng() % (bytes.size() - n + 1), n),
                  zmq::send_flags::none)
               .has_value();
    } else {  // a well-formed header with random fields, and a random payload
      proto::Header h;
      h.set_type(static_cast<proto::MsgType>(rng() % 50));
      h.set_sender(static_cast<int32_t>(rng() % 8) - 1);
      h.set_request_id(rng());
      h.set_partition(static_cast<int32_t>(rng() % 8));
      h.set_clock(static_cast<int64_t>(rng() % 1000));
      std::vector<zmq::message_t> payload;
      payload.emplace_back(bytes.data(), std::min<size_t>(n, 4096));
      ok = Send(s, h, std::move(payload));
    }
    if (ok) sent.fetch_add(1);
  }
}

// Raw TCP connections that send a partial ZeroMQ greeting and stall, `count` at once, each
// replaced by a new one all the time.
void HalfOpen(int port, int count, const std::atomic<bool>& stop, std::atomic<int64_t>& opened) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const uint8_t greeting[] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f};
  std::deque<int> fds;
  while (!stop.load()) {
    if (static_cast<int>(fds.size()) >= count) {
      close(fds.front());
      fds.pop_front();
    }
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      (void)!write(fd, greeting, sizeof(greeting));
      fds.push_back(fd);
      opened.fetch_add(1);
    } else if (fd >= 0) {
      close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int fd : fds) close(fd);
}

// A peer that registers as a new worker again and again, each time on a new connection (a
// registration is per connection) that it drops at once: every admission it gets is a member
// the scheduler must keep (a dead worker may come back under its rank).
void Joins(const std::string& endpoint, uint32_t seed, const std::atomic<bool>& stop,
           std::atomic<int64_t>& admitted, std::atomic<int64_t>& refused) {
  zmq::context_t ctx(1);
  std::mt19937 rng(seed);
  while (!stop.load()) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 200);
    s.set(zmq::sockopt::routing_id, fmt::format("churn-{}-{}", seed, rng()));
    s.connect(endpoint);
    proto::Header h;
    h.set_type(proto::REGISTER);
    h.set_role(proto::WORKER);
    h.set_request_id(1);
    h.set_host("churn");
    h.set_pid(static_cast<int32_t>(rng() % 100000));
    if (!Send(s, h)) continue;
    for (int i = 0; i < 4; ++i) {  // the reply (a view or a join may come first)
      auto reply = Receive(s, zmq::recv_flags::none, /*routed=*/false);
      if (!reply) break;
      if (reply->message.header.request_id() != 1) continue;
      (reply->message.header.type() == proto::REGISTER_REPLY ? admitted : refused).fetch_add(1);
      break;
    }
  }
}

}  // namespace

int RunFlood(const FloodOptions& o) {
  const int port = FreeLoopbackPort();
  BenchClusterOptions cluster_options;
  cluster_options.servers = 1;
  cluster_options.workers = 1;
  cluster_options.scheduler_flags = {"--partition_bytes=1048576"};
  cluster_options.server_flags = {"--optimizer=sgd:lr=1", "--init=zeros"};
  cluster_options.server_own_flags = {{fmt::format("--bind=tcp://127.0.0.1:{}", port)}};
  // The legitimate worker reaches the server over TCP, as the junk does: a remote worker
  // beside remote attackers (through the co-located shared memory its payloads would not load
  // the server's socket at all).
  auto cluster =
      BenchCluster::Launch(cluster_options, {{"t", {kElements}, 0}}, {}, {.transport = "socket"});
  if (!cluster.ok()) {
    std::fprintf(stderr, "hetps-bench flood: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  Client& client = *(*cluster)->clients()[0];
  const pid_t scheduler = (*cluster)->Pids()[0];
  const pid_t server = (*cluster)->Pids()[1];
  const std::string endpoint = fmt::format("tcp://127.0.0.1:{}", port);

  int64_t pushes = 0;
  std::atomic<bool> never{false}, stop{false};
  const double before = Legitimate(client, pushes, never, 3);
  const double rss_before = RssMib(server);
  double rss_peak = rss_before;
  double rss_half = rss_before;  // the peak over the flood's first half
  const double shmem_before = StatusMib(server, "RssShmem:");
  double shmem_peak = shmem_before;
  const int server_fds_before = OpenFiles(server);
  int server_fds_peak = server_fds_before;
  const double scheduler_before = RssMib(scheduler);
  double scheduler_peak = scheduler_before;
  std::atomic<int64_t> junk_sent{0}, connections{0}, joins_admitted{0}, joins_refused{0};
  std::vector<std::thread> attackers;
  for (int i = 0; i < o.junk_peers; ++i) {
    attackers.emplace_back(Junk, endpoint, 17u + i, std::cref(stop), std::ref(junk_sent));
  }
  if (o.half_open > 0) {
    attackers.emplace_back(HalfOpen, port, o.half_open, std::cref(stop), std::ref(connections));
  }
  for (int i = 0; i < o.join_peers; ++i) {
    attackers.emplace_back(Joins, (*cluster)->endpoint(), 91u + i, std::cref(stop),
                           std::ref(joins_admitted), std::ref(joins_refused));
  }
  const auto flood_start = std::chrono::steady_clock::now();
  std::thread sampler([&] {
    while (!stop.load()) {
      rss_peak = std::max(rss_peak, RssMib(server));
      if (std::chrono::steady_clock::now() - flood_start <
          std::chrono::duration<double>(o.seconds / 2)) {
        rss_half = rss_peak;
      }
      shmem_peak = std::max(shmem_peak, StatusMib(server, "RssShmem:"));
      scheduler_peak = std::max(scheduler_peak, RssMib(scheduler));
      server_fds_peak = std::max(server_fds_peak, OpenFiles(server));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  const double during = Legitimate(client, pushes, never, o.seconds);
  stop = true;
  for (auto& t : attackers) t.join();
  sampler.join();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const double rss_after = RssMib(server);
  const double scheduler_after = RssMib(scheduler);
  const double after = Legitimate(client, pushes, never, 3);
  const bool served = before > 0 && during > 0 && after > 0;
  const double growth = rss_peak - rss_before;
  std::printf(
      "{\"bench\":\"flood\",\"seconds\":%.0f,\"junk_peers\":%d,\"half_open\":%d,"
      "\"junk_messages\":%lld,\"connections_opened\":%lld,\"legit_gbps_before\":%.3f,"
      "\"legit_gbps_during\":%.3f,\"legit_gbps_after\":%.3f,\"during_vs_before\":%.2f,"
      "\"values_right\":%s,\"server_rss_mib_before\":%.1f,\"server_rss_mib_peak\":%.1f,"
      "\"server_rss_mib_after\":%.1f,\"server_rss_mib_half\":%.1f,"
      "\"server_shmem_mib_before\":%.1f,\"server_shmem_mib_peak\":%.1f,\"join_peers\":%d,"
      "\"joins_admitted\":%lld,\"joins_refused\":%lld,\"scheduler_rss_mib_before\":%.1f,"
      "\"scheduler_rss_mib_peak\":%.1f,\"scheduler_rss_mib_after\":%.1f,"
      "\"server_open_files_before\":%d,\"server_open_files_peak\":%d}\n",
      o.seconds, o.junk_peers, o.half_open, static_cast<long long>(junk_sent.load()),
      static_cast<long long>(connections.load()), before, during, after,
      before > 0 ? during / before : 0.0, served ? "true" : "false", rss_before, rss_peak,
      rss_after, rss_half, shmem_before, shmem_peak, o.join_peers,
      static_cast<long long>(joins_admitted.load()), static_cast<long long>(joins_refused.load()),
      scheduler_before, scheduler_peak, scheduler_after, server_fds_before, server_fds_peak);
  std::fflush(stdout);
  if (!served) {
    std::fprintf(stderr, "hetps-bench flood: the worker was not served right (log: %s)\n",
                 (*cluster)->log_path().c_str());
    return 1;
  }
  if (o.max_rss_growth_mb > 0 && growth > o.max_rss_growth_mb) {
    std::fprintf(stderr, "hetps-bench flood: the server's memory grew %.1f MiB (bound %.1f)\n",
                 growth, o.max_rss_growth_mb);
    return 1;
  }
  return 0;
}

}  // namespace hetps::bench
