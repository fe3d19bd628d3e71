// Test harness: real hetps processes on loopback (scheduler, servers, worker binaries) plus
// in-process clients. Every process is killed when the harness goes away, also on failure.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "worker/client.h"

namespace hetps::testing {

inline std::string Bin(const std::string& name) { return std::string(HETPS_BIN_DIR) + "/" + name; }

class Process {
 public:
  // Starts argv[0]; with `output`, its stdout and stderr go to that file.
  explicit Process(std::vector<std::string> argv, const std::string& output = "") {
    SpawnOptions options;
    options.output_file = output;
    options.truncate = true;
    auto pid = Spawn(argv, options);
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    if (pid.ok()) {
      pid_ = *pid;
    } else {
      status_ = 127 << 8;  // as if it had exited 127: nothing to wait for
    }
  }
  ~Process() {
    if (!status_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig) { kill(pid_, sig); }
  // The waitpid status once exited within `timeout`, else nullopt.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int st;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

struct ClusterOptions {
  int servers = 2;
  int workers = 2;
  std::vector<std::string> scheduler_flags;
  std::vector<std::string> server_flags;
};

class LocalCluster {
 public:
  explicit LocalCluster(const ClusterOptions& o) : options_(o) {
    dir_ = std::filesystem::temp_directory_path() /
           ("hetps-test-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    const std::string endpoint_file = (dir_ / "endpoint").string();
    std::vector<std::string> sched = {
        Bin("hetps-scheduler"), "--num_servers=" + std::to_string(o.servers),
        "--num_workers=" + std::to_string(o.workers), "--endpoint_file=" + endpoint_file};
    sched.insert(sched.end(), o.scheduler_flags.begin(), o.scheduler_flags.end());
    scheduler_ = std::make_unique<Process>(sched);
    for (int i = 0; i < 500 && endpoint_.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::ifstream in(endpoint_file);
      std::getline(in, endpoint_);
    }
    EXPECT_FALSE(endpoint_.empty()) << "the scheduler did not start";
    for (int i = 0; i < o.servers; ++i) {
      std::vector<std::string> argv = {Bin("hetps-server"), "--scheduler=" + endpoint_};
      argv.insert(argv.end(), o.server_flags.begin(), o.server_flags.end());
      servers_.push_back(std::make_unique<Process>(argv));
    }
  }
  ~LocalCluster() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const std::string& endpoint() const { return endpoint_; }
  Process& scheduler() { return *scheduler_; }
  Process& server(int i) { return *servers_[i]; }

  // A hetps-worker process joining this cluster; with `output`, what it prints goes there.
  std::unique_ptr<Process> StartWorker(std::vector<std::string> flags,
                                       const std::string& output = "") {
    flags.insert(flags.begin(), {Bin("hetps-worker"), "--scheduler=" + endpoint_});
    return std::make_unique<Process>(flags, output);
  }
  // A file in this cluster's temporary folder.
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // Runs `hetps ctl --scheduler=<this cluster> <args>`; returns its exit code.
  int Ctl(const std::string& args) const {
    const std::string cmd = Bin("hetps") + " ctl --scheduler=" + endpoint_ + " " + args;
    const int st = std::system(cmd.c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

  ClientOptions ClientOpts() const {
    ClientOptions c;
    c.scheduler = endpoint_;
    c.join_timeout_ms = 20000;
    c.heartbeat_interval_ms = 200;
    return c;
  }

  // Connects n in-process clients at once (Connect blocks until the cluster is complete).
  std::vector<std::unique_ptr<Client>> ConnectClients(int n) {
    std::vector<std::unique_ptr<Client>> clients(n);
    RunEach(n, [&](int i) {
      auto c = Client::Connect(ClientOpts());
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      clients[i] = std::move(*c);
    });
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
  ClusterOptions options_;
  std::filesystem::path dir_;
  std::string endpoint_;
  std::unique_ptr<Process> scheduler_;
  std::vector<std::unique_ptr<Process>> servers_;
};

}  // namespace hetps::testing
