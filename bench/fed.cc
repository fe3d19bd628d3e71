#include "bench/fed.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "bench/bench_cluster.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct ProcSample {
  int64_t pss_kb = 0, rss_kb = 0;
  double cpu_s = 0;
  bool alive = false;
};

// PSS and RSS from smaps_rollup, CPU from stat; alive = false once the process is gone.
ProcSample Sample(pid_t pid) {
  ProcSample s;
  std::ifstream rollup(fmt::format("/proc/{}/smaps_rollup", pid));
  for (std::string line; std::getline(rollup, line);) {
    std::istringstream in(line);
    std::string key;
    int64_t kb = 0;
    in >> key >> kb;
    if (key == "Rss:") s.rss_kb = kb, s.alive = true;
    if (key == "Pss:") s.pss_kb = kb;
  }
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream in(text.substr(paren + 2));
    std::string field;
    std::vector<std::string> f;
    while (in >> field) f.push_back(field);
    if (f.size() > 12) {  // utime and stime: fields 14 and 15 of the whole line
      s.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  return s;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Rounds (rows of the rounds log) and the seconds from the first round's opening to the last one's
// application.
std::pair<int, double> RoundsSpan(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);  // header
  int rounds = 0;
  double last = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) f.push_back(cell);
    if (f.size() < 2) continue;
    last = std::stod(f[1]);  // wall_s: from the first round's opening
    ++rounds;
  }
  return {rounds, last};
}

// The cluster's memory while the clients run (peak PSS and RSS, the clients' share at the peak)
// and the evaluator's CPU time, sampled every 200 ms on a thread of its own.
class Sampler {
 public:
  // `pids`: scheduler, servers, then workers in rank order; the evaluator (rank 0) at
  // `evaluator`, the clients after it.
  Sampler(std::vector<pid_t> pids, size_t evaluator, Clock::time_point start)
      : pids_(std::move(pids)), evaluator_(evaluator), start_(start) {
    thread_ = std::thread([this] {
      while (!done_.load()) {
        SampleOnce();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  }
  void Stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  ~Sampler() { Stop(); }

  int64_t peak_pss_kb = 0, peak_rss_kb = 0, clients_pss_at_peak = 0, clients_rss_at_peak = 0;
  int clients_alive_at_peak = 0;
  std::vector<std::pair<double, double>> evaluator_cpu;  // (seconds since start, cpu seconds)

 private:
  void SampleOnce() {
    int64_t pss = 0, rss = 0, client_pss = 0, client_rss = 0;
    int clients_alive = 0;
    for (size_t i = 0; i < pids_.size(); ++i) {
      const ProcSample p = Sample(pids_[i]);
      pss += p.pss_kb;
      rss += p.rss_kb;
      if (i > evaluator_ && p.alive) {
        client_pss += p.pss_kb;
        client_rss += p.rss_kb;
        ++clients_alive;
      }
      if (i == evaluator_ && p.alive) {
        evaluator_cpu.push_back(
            {std::chrono::duration<double>(Clock::now() - start_).count(), p.cpu_s});
      }
    }
    if (pss > peak_pss_kb) {
      peak_pss_kb = pss;
      clients_pss_at_peak = client_pss;
      clients_rss_at_peak = client_rss;
      clients_alive_at_peak = clients_alive;
    }
    peak_rss_kb = std::max(peak_rss_kb, rss);
  }

  const std::vector<pid_t> pids_;
  const size_t evaluator_;
  const Clock::time_point start_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// The evaluator's CPU rate between 30% and 90% of its samples: idle, like an unselected client
// (-1: too few samples).
double IdleCpuPercent(const std::vector<std::pair<double, double>>& cpu) {
  if (cpu.size() < 4) return -1;
  const auto& a = cpu[cpu.size() * 3 / 10];
  const auto& b = cpu[cpu.size() * 9 / 10];
  return b.first > a.first ? 100.0 * (b.second - a.second) / (b.first - a.first) : -1;
}

Status StartClients(BenchCluster& cluster, const FedBenchOptions& o) {
  for (int i = 0; i <= o.clients; ++i) {
    std::vector<std::string> flags = {"--workload=edge",
                                      fmt::format("--rank={}", i),
                                      "--model=" + o.model,
                                      "--device=cpu",
                                      "--partition=dirichlet",
                                      "--dirichlet_alpha=0.3",
                                      "--evaluators=1",
                                      fmt::format("--rounds={}", o.rounds),
                                      fmt::format("--eval_every={}", o.rounds),
                                      "--local_epochs=1",
                                      "--batch=32"};
    if (o.clock == "virtual") {  // hetero100's devices and links, in virtual time
      for (const char* f :
           {"--clock=virtual", "--device_spread=1.0", "--link_up_mbps=2", "--link_down_mbps=10",
            "--link_spread=0.7", "--link_latency_ms=40", "--link_jitter_ms=10"}) {
        flags.push_back(f);
      }
    }
    if (Status s = cluster.StartWorker(flags); !s.ok()) return s;
  }
  return Status();
}

}  // namespace

int RunFedBench(const FedBenchOptions& o) {
  if (o.clients < 2 || o.clients_per_round < 1 || o.clients_per_round > o.clients || o.rounds < 1 ||
      (o.clock != "wall" && o.clock != "virtual")) {
    std::fprintf(stderr,
                 "hetps-bench fed: need --clients >= 2, 1 <= --clients_per_round <= --clients "
                 "and --rounds >= 1, --clock wall or virtual\n");
    return 2;
  }
  char logs_template[] = "/tmp/hetps-bench-fed-XXXXXX";
  if (mkdtemp(logs_template) == nullptr) {
    std::perror("hetps-bench fed: mkdtemp");
    return 1;
  }
  const std::string logs = logs_template;
  const std::string rounds_csv = logs + "/rounds.csv";
  BenchClusterOptions co;
  co.servers = o.servers;
  co.workers = o.clients + 1;  // and the evaluator, rank 0
  co.scheduler_flags = {fmt::format("--clients_per_round={}", o.clients_per_round),
                        "--overcommit=1.3",
                        fmt::format("--rounds={}", o.rounds),
                        "--rounds_csv=" + rounds_csv,
                        fmt::format("--heartbeat_timeout_ms={}", o.heartbeat_timeout_ms),
                        "--clock=" + o.clock};
  co.server_flags = {"--consistency=selected", "--aggregator=fedavg", "--optimizer=sgd:lr=1",
                     "--init=worker"};
  auto cluster = BenchCluster::Start(co);
  if (!cluster.ok()) {
    std::fprintf(stderr, "hetps-bench: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const auto start = Clock::now();
  if (Status s = StartClients(**cluster, o); !s.ok()) {
    std::fprintf(stderr, "hetps-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  // pids: scheduler, servers, then workers in rank order (rank 0 is the evaluator).
  Sampler sampler((*cluster)->Pids(), 1 + static_cast<size_t>(o.servers), start);
  const Status waited = (*cluster)->WaitWorkers();
  sampler.Stop();
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (!waited.ok()) {
    std::fprintf(stderr, "hetps-bench: %s\n", waited.ToString().c_str());
    return 1;
  }
  const auto [rounds, rounds_s] = RoundsSpan(Slurp(rounds_csv));
  const double idle_cpu_percent = IdleCpuPercent(sampler.evaluator_cpu);
  const double mib = 1.0 / 1024;
  std::printf(
      "{\"bench\":\"fed\",\"clients\":%d,\"servers\":%d,\"clients_per_round\":%d,\"model\":\"%s\","
      "\"heartbeat_timeout_ms\":%d,\"clock\":\"%s\",\"rounds\":%d,\"rounds_s\":%.1f,\"wall_s\":%."
      "1f,"
      "\"aggregations_per_min\":%.1f,"
      "\"total_pss_mib\":%.1f,"
      "\"total_rss_mib\":%.1f,\"per_client_pss_mib\":%.2f,\"per_client_rss_mib\":%.2f,"
      "\"idle_client_cpu_percent\":%.2f}\n",
      o.clients, o.servers, o.clients_per_round, o.model.c_str(), o.heartbeat_timeout_ms,
      o.clock.c_str(), rounds, rounds_s, wall_s, rounds_s > 0 ? rounds * 60.0 / rounds_s : 0.0,
      sampler.peak_pss_kb * mib, sampler.peak_rss_kb * mib,
      sampler.clients_alive_at_peak > 0
          ? sampler.clients_pss_at_peak * mib / sampler.clients_alive_at_peak
          : 0.0,
      sampler.clients_alive_at_peak > 0
          ? sampler.clients_rss_at_peak * mib / sampler.clients_alive_at_peak
          : 0.0,
      idle_cpu_percent);
  std::fflush(stdout);
  std::error_code ec;
  std::filesystem::remove_all(logs, ec);
  return 0;
}

}  // namespace hetps::bench
