#include "bench/aggregation.h"

#include <fmt/format.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "bench/bench_cluster.h"
#include "bench/server_host.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Where the workers are and what they push through: on this host directly or through a
// host-local aggregator; each on a host of its own (netns) directly or through the switch.
enum class Mode { kDirect, kHostLocal, kSwitchDirect, kSwitch };

struct Placement {
  double round_ms = 0;
  int64_t link_bytes = -1;        // on the server's link, both ways (netns)
  int64_t pushes = 0, pulls = 0;  // requests the server served
  int64_t peak_slot_bytes = -1;   // the switch's slots at most
};

// The server's "stopped: N pushes, M pulls served" line, once it stopped (and the switch's
// peak slot bytes).
void ReadServed(const std::string& log, Placement& p) {
  static const std::regex stopped(R"(stopped: (\d+) pushes, (\d+) pulls served)");
  static const std::regex slots(R"(its slots held at most (\d+) bytes)");
  for (int i = 0; i < 100; ++i) {
    std::ifstream in(log);
    std::stringstream read;
    read << in.rdbuf();
    const std::string text = read.str();
    std::smatch m;
    if (std::regex_search(text, m, stopped)) {
      p.pushes = std::stoll(m[1]);
      p.pulls = std::stoll(m[2]);
      if (std::regex_search(text, m, slots)) p.peak_slot_bytes = std::stoll(m[1]);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

StatusOr<Placement> RunPlacement(const AggregationBenchOptions& o, double mb, Mode mode,
                                 const ServerHost* host) {
  const bool own_hosts = host != nullptr && (mode == Mode::kSwitchDirect || mode == Mode::kSwitch);
  BenchClusterOptions c;
  c.servers = 1;
  c.workers = o.workers;
  c.aggregators = mode == Mode::kHostLocal || mode == Mode::kSwitch ? 1 : 0;
  if (mode == Mode::kSwitch) {
    c.aggregator_flags = {fmt::format("--switch_chunk={}", o.switch_chunk),
                          fmt::format("--switch_slots={}", o.switch_slots)};
    // On the bridge, where every worker's host reaches it over its own link.
    if (host != nullptr) c.aggregator_flags.push_back(ServerHost::kBridgeBind);
  }
  c.scheduler_flags = {fmt::format("--partition_bytes={}", o.partition_bytes)};
  c.server_flags = {"--consistency=bsp", "--init=zeros", "--optimizer=sgd:lr=0.001",
                    "--log_level=info"};
  if (host != nullptr) host->Place(c);
  const int64_t n = static_cast<int64_t>(mb * (1 << 20) / sizeof(float));
  TransferOptions transfer;
  if (own_hosts) transfer.enter = [host](int i) { return host->EnterWorkerHost(i); };
  auto cluster = BenchCluster::Launch(c, {{"w", {n}, 0}}, {}, transfer);
  if (!cluster.ok()) return cluster.status();
  auto& clients = (*cluster)->clients();
  std::barrier start(o.workers);
  std::vector<Status> results(o.workers);
  Clock::time_point t0;
  int64_t bytes0 = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < o.workers; ++i) {
    threads.emplace_back([&, i] {
      std::vector<float> g(n, 0.001f * static_cast<float>(i + 1)), w(n);
      for (int r = 0; r <= o.rounds; ++r) {
        if (r == 1) {  // the first round warms the connections up
          start.arrive_and_wait();
          if (i == 0) {
            t0 = Clock::now();
            if (host != nullptr) bytes0 = host->BytesToServer() + host->BytesFromServer();
          }
        }
        Status s = clients[i]->Push("w", g.data(), n).Wait();
        if (s.ok()) s = clients[i]->Clock();
        if (s.ok()) s = clients[i]->Pull("w", w.data(), n).Wait();
        if (!s.ok()) return (void)(results[i] = s);
      }
    });
  }
  for (auto& t : threads) t.join();
  Placement p;
  p.round_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / o.rounds;
  if (host != nullptr) p.link_bytes = host->BytesToServer() + host->BytesFromServer() - bytes0;
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  for (auto& client : clients) (void)client->Finish();
  ReadServed((*cluster)->log_path(), p);
  return p;
}

}  // namespace

int RunAggregationBench(const AggregationBenchOptions& o) {
  auto host = ServerHost::ForLinks(o.links, o.link_mbps);
  if (!host.ok()) {
    std::fprintf(stderr, "aggregation: %s\n", host.status().ToString().c_str());
    return 1;
  }
  if (*host) {
    if (Status s = (*host)->AddWorkerHosts(o.workers); !s.ok()) {
      std::fprintf(stderr, "aggregation: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  for (double mb : o.mb) {
    std::vector<Placement> runs;  // by Mode; on loopback the switch's direct run is kDirect's
    for (Mode m : {Mode::kDirect, Mode::kHostLocal, Mode::kSwitchDirect, Mode::kSwitch}) {
      if (m == Mode::kSwitchDirect && !*host) {
        runs.push_back(runs[0]);
        continue;
      }
      auto p = RunPlacement(o, mb, m, host->get());
      if (!p.ok()) {
        std::fprintf(stderr, "aggregation: %s\n", p.status().ToString().c_str());
        return 1;
      }
      runs.push_back(*p);
    }
    const Placement *direct = &runs[0], *local = &runs[1], *sw_direct = &runs[2], *sw = &runs[3];
    // Bytes on the server's link: what tc counted (netns), else the requests it served, each a
    // partition's worth (whole-tensor pushes and pulls of equal partitions).
    auto bytes = [&](const Placement& p) {
      return p.link_bytes >= 0 ? static_cast<double>(p.link_bytes)
                               : (p.pushes + p.pulls) * mb * (1 << 20) / (o.rounds + 1);
    };
    std::printf(
        "{\"bench\":\"aggregation\",\"workers\":%d,\"mb\":%g,\"links\":\"%s\",\"link_mbps\":%g,"
        "\"rounds\":%d,\"direct\":{\"round_ms\":%.1f,\"server_bytes\":%.0f,\"server_pushes\":%lld,"
        "\"server_pulls\":%lld},\"host_local\":{\"round_ms\":%.1f,\"server_bytes\":%.0f,"
        "\"server_pushes\":%lld,\"server_pulls\":%lld,\"round_speedup\":%.2f,"
        "\"server_bytes_ratio\":%.3f},\"switch\":{\"chunk_words\":%d,\"slots\":%d,"
        "\"direct_round_ms\":%.1f,\"direct_server_bytes\":%.0f,\"round_ms\":%.1f,"
        "\"server_bytes\":%.0f,\"server_pushes\":%lld,\"server_pulls\":%lld,"
        "\"peak_slot_bytes\":%lld,\"round_speedup\":%.2f,\"server_bytes_ratio\":%.3f}}\n",
        o.workers, mb, o.links.c_str(), o.link_mbps, o.rounds, direct->round_ms, bytes(*direct),
        static_cast<long long>(direct->pushes), static_cast<long long>(direct->pulls),
        local->round_ms, bytes(*local), static_cast<long long>(local->pushes),
        static_cast<long long>(local->pulls), direct->round_ms / local->round_ms,
        bytes(*local) / bytes(*direct), o.switch_chunk, o.switch_slots, sw_direct->round_ms,
        bytes(*sw_direct), sw->round_ms, bytes(*sw), static_cast<long long>(sw->pushes),
        static_cast<long long>(sw->pulls), static_cast<long long>(sw->peak_slot_bytes),
        sw_direct->round_ms / sw->round_ms, bytes(*sw) / bytes(*sw_direct));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace hetps::bench
