// Test harness: real hetps processes on loopback (scheduler, servers, worker binaries) plus
// in-process clients. Every process is killed when the harness goes away, also on failure.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/local_cluster.h"
#include "common/subprocess.h"
#include "common/supervisor.h"
#include "hetps/client.h"
#include "tests/scratch_dir.h"

namespace hetps::testing {

// User and system CPU seconds of this process (every thread) so far.
inline double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

inline std::string Bin(const std::string& name) { return std::string(HETPS_BIN_DIR) + "/" + name; }

// A file's whole text ("" when it cannot be read): a process's output, a run's files.
inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What a shell command did: its exit code (-1 when it did not exit, or could not start) and its
// stdout and stderr together.
struct Ran {
  int code = -1;
  std::string output;
};
inline Ran Shell(const std::string& command) {
  auto r = RunCaptured({"/bin/sh", "-c", command});
  if (!r.ok()) return {-1, r.status().ToString()};
  return {WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1, std::move(r->output)};
}

// A TCP port free on loopback now (-1 when none could be found).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// A process the cluster's supervisor started; killed (SIGKILL) when the handle goes away.
class Process {
 public:
  Process(Supervisor& supervisor, ChildProcess* child) : supervisor_(supervisor), child_(child) {}
  ~Process() {
    if (child_->running()) {
      kill(child_->pid, SIGKILL);
      supervisor_.WaitExit(*child_, std::chrono::seconds(30));
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return child_->pid; }
  void Signal(int sig) {
    if (child_->running()) kill(child_->pid, sig);
  }
  // The waitpid status once exited within `timeout`, else nullopt.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout) {
    return supervisor_.WaitExit(*child_, timeout);
  }

 private:
  Supervisor& supervisor_;
  ChildProcess* child_;
};

struct ClusterOptions {
  int servers = 2;
  int workers = 2;
  std::vector<std::string> scheduler_flags;
  std::vector<std::string> server_flags;
  std::string server_exec;  // a command prefix for each server, e.g. "env HETPS_CRASH_AT=..."
  std::string scheduler_bind = "tcp://127.0.0.1:*";
  std::vector<std::vector<std::string>> server_own_flags;  // per server, after server_flags
  std::string log_file;  // set: every process's output goes there (else the test's own)
  int standbys = 0;      // backups (--standby), server(servers..) after the primaries
  int aggregators = 0;   // hetps-aggregator processes (docs/aggregation-tier.md)
  std::vector<std::string> aggregator_flags;
};

// hetps::LocalCluster with the test's expectations: a cluster that cannot start fails the test.
class LocalCluster {
 public:
  explicit LocalCluster(const ClusterOptions& o)
      : supervisor_(SupervisorOptions{
            // kill at once when the test ends
            .output = o.log_file.empty() ? SupervisorOptions::Output::kInherit
                                         : SupervisorOptions::Output::kFile,
            .log_file = o.log_file,
            .grace_ms = 0}) {
    dir_ = std::filesystem::temp_directory_path() /
           ("hetps-test-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    LocalClusterOptions options;
    options.servers = o.servers;
    options.workers = o.workers;
    options.bin_dir = HETPS_BIN_DIR;
    options.work_dir = dir_.string();
    options.scheduler_flags = o.scheduler_flags;
    options.server_flags = o.server_flags;
    options.standbys = o.standbys;
    options.server_exec = o.server_exec;
    options.scheduler_bind = o.scheduler_bind;
    options.server_own_flags = o.server_own_flags;
    options.aggregators = o.aggregators;
    options.aggregator_flags = o.aggregator_flags;
    cluster_ = std::make_unique<hetps::LocalCluster>(supervisor_, options);
    const Status started = cluster_->Start();
    EXPECT_TRUE(started.ok()) << started.ToString();
    if (cluster_->scheduler() != nullptr) {
      scheduler_ = std::make_unique<Process>(supervisor_, cluster_->scheduler());
    }
    for (ChildProcess* server : cluster_->servers()) {
      servers_.push_back(std::make_unique<Process>(supervisor_, server));
    }
    for (ChildProcess* aggregator : cluster_->aggregators()) {
      aggregators_.push_back(std::make_unique<Process>(supervisor_, aggregator));
    }
  }
  ~LocalCluster() {
    aggregators_.clear();
    servers_.clear();
    scheduler_.reset();
    supervisor_.StopAll();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::string& endpoint() const { return cluster_->endpoint(); }
  Process& scheduler() { return *scheduler_; }
  Process& server(int i) { return *servers_.at(i); }
  Process& aggregator(int i) { return *aggregators_.at(i); }
  // Starts the scheduler again with its flags (after it exited); it needs a --data_dir.
  void RestartScheduler() {
    auto child = cluster_->RestartScheduler();
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    scheduler_ = std::make_unique<Process>(supervisor_, *child);
  }
  // Starts server i again with its flags (after it exited), e.g. on its data dir.
  void RestartServer(int i) {
    auto child = cluster_->RestartServer(i);
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    servers_.at(i) = std::make_unique<Process>(supervisor_, *child);
  }

  // One more server (the scheduler needs --max_servers); returns its index.
  int StartServer() {
    auto child = cluster_->StartServer();
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    if (!child.ok()) return -1;
    servers_.push_back(std::make_unique<Process>(supervisor_, *child));
    return static_cast<int>(servers_.size()) - 1;
  }
  // One more standby server (the scheduler needs --replicas); returns its index.
  int StartStandby() {
    auto child = cluster_->StartStandby();
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    if (!child.ok()) return -1;
    servers_.push_back(std::make_unique<Process>(supervisor_, *child));
    return static_cast<int>(servers_.size()) - 1;
  }
  // A hetps-worker process joining this cluster; with `output`, what it prints goes there.
  std::unique_ptr<Process> StartWorker(const std::vector<std::string>& flags,
                                       const std::string& output = "") {
    auto child = cluster_->StartWorker(workers_started_++, flags, output);
    EXPECT_TRUE(child.ok()) << child.status().ToString();
    if (!child.ok()) return nullptr;
    return std::make_unique<Process>(supervisor_, *child);
  }
  // A file in this cluster's temporary folder.
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // Runs `hetps ctl --scheduler=<this cluster> <args>`; returns its exit code.
  int Ctl(const std::string& args) const {
    const std::string cmd = Bin("hetps") + " ctl --scheduler=" + endpoint() + " " + args;
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

  ClientOptions ClientOpts() const {
    ClientOptions c;
    c.scheduler = endpoint();
    c.join_timeout_ms = 20000;
    c.heartbeat_interval_ms = 200;
    return c;
  }

  // Connects n in-process clients at once (Connect blocks until the cluster is complete).
  // `adjust` changes the options of each (ClientOpts() otherwise).
  std::vector<std::unique_ptr<Client>> ConnectClients(
      int n, const std::function<void(ClientOptions&)>& adjust = {}) {
    std::vector<std::unique_ptr<Client>> clients(n);
    RunEach(n, [&](int i) {
      ClientOptions options = ClientOpts();
      if (adjust) adjust(options);
      auto c = Client::Connect(options);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      clients[i] = std::move(*c);
    });
    // A client that could not connect ends the test here (gtest reports the exception) instead
    // of leaving a null for the test to dereference.
    if (std::any_of(clients.begin(), clients.end(), [](const auto& c) { return c == nullptr; })) {
      throw std::runtime_error("ConnectClients: not every client connected");
    }
    return clients;
  }

  // Runs fn(0..n-1) on n threads and joins them (for collective calls).
  static void RunEach(int n, const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
    for (auto& t : threads) t.join();
  }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
  Supervisor supervisor_;
  std::unique_ptr<hetps::LocalCluster> cluster_;
  std::unique_ptr<Process> scheduler_;
  std::vector<std::unique_ptr<Process>> servers_;
  std::vector<std::unique_ptr<Process>> aggregators_;
  int workers_started_ = 0;
};

}  // namespace hetps::testing
