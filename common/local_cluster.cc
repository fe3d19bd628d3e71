#include "common/local_cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace hetps {
namespace {

using Clock = std::chrono::steady_clock;

std::string WithIndex(std::string text, const std::string& index) {
  for (size_t at; (at = text.find("{i}")) != std::string::npos;) text.replace(at, 3, index);
  return text;
}
std::string WithIndex(const std::string& text, int i) { return WithIndex(text, std::to_string(i)); }

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

std::string SelfDir() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
}

LocalCluster::LocalCluster(Supervisor& supervisor, LocalClusterOptions options)
    : supervisor_(supervisor), options_(std::move(options)) {}

StatusOr<ChildProcess*> LocalCluster::StartPlaced(const std::string& role, int index,
                                                  const std::vector<std::string>& argv,
                                                  const std::string& output_file) {
  std::string label = index < 0 ? role : fmt::format("{} {}", role, index);
  if (!options_.place) return supervisor_.Start(role, label, argv, output_file);
  LocalClusterOptions::Placed placed = options_.place(role, index, argv);
  return supervisor_.Start(role, label + placed.where, placed.argv, output_file,
                           /*stop_by_closing_input=*/true);
}

Status LocalCluster::AwaitScheduler() {
  const LocalClusterOptions& o = options_;
  const std::string endpoint_file = o.work_dir + "/scheduler.endpoint";
  const auto deadline = Clock::now() + o.start_timeout;
  while (true) {
    if (int sig = supervisor_.Pump(o.scheduler_ready ? 200 : 20)) {
      return Status::Aborted(fmt::format("stopped by {}", strsignal(sig)));
    }
    if (!scheduler_->running()) {
      return Status::Unavailable(
          fmt::format("the {} did not start: it {}", scheduler_->label, scheduler_->Describe()));
    }
    if (o.scheduler_ready) {
      if (o.scheduler_ready()) {
        endpoint_ = o.scheduler_endpoint;
        return Status();
      }
    } else {
      std::ifstream in(endpoint_file);
      std::getline(in, endpoint_);
      if (!endpoint_.empty()) return Status();
    }
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded(
          o.scheduler_ready ? fmt::format("the {} did not answer at {} in {} ms", scheduler_->label,
                                          o.scheduler_endpoint, o.start_timeout.count())
                            : fmt::format("the scheduler did not report its endpoint in {} ms",
                                          o.start_timeout.count()));
    }
  }
}

Status LocalCluster::Start() {
  const LocalClusterOptions& o = options_;
  std::vector<std::string> argv = {
      o.bin_dir + "/hetps-scheduler", fmt::format("--num_servers={}", o.servers),
      fmt::format("--num_workers={}", o.workers), "--bind=" + o.scheduler_bind};
  if (o.aggregators > 0) argv.push_back(fmt::format("--aggregators={}", o.aggregators));
  if (!o.scheduler_ready) argv.push_back("--endpoint_file=" + o.work_dir + "/scheduler.endpoint");
  for (const std::string& flag : o.scheduler_flags) argv.push_back(WithIndex(flag, "scheduler"));
  auto scheduler = StartPlaced("scheduler", -1, argv);
  if (!scheduler.ok()) return scheduler.status();
  scheduler_ = *scheduler;
  scheduler_argv_ = argv;
  if (Status s = AwaitScheduler(); !s.ok()) return s;
  // Reads only members (options_, endpoint_): StartServer calls it later.
  auto server_argv = [this](int i, bool standby) {
    const LocalClusterOptions& o = options_;
    std::vector<std::string> a = Words(WithIndex(o.server_exec, i));
    a.insert(a.end(), {o.bin_dir + "/hetps-server", "--scheduler=" + endpoint_,
                       "--bind=" + WithIndex(o.server_bind, i)});
    for (const std::string& flag : o.server_flags) {
      if (standby && (flag.starts_with("--data_dir=") || flag.starts_with("--restore_from="))) {
        continue;  // a standby takes its partitions from the primary
      }
      a.push_back(WithIndex(flag, i));
    }
    if (standby) a.push_back("--standby");
    if (i < static_cast<int>(o.server_own_flags.size())) {
      a.insert(a.end(), o.server_own_flags[i].begin(), o.server_own_flags[i].end());
    }
    return a;
  };
  // Standbys started later (StartStandby) take the first standby's flags.
  standby_argv_ = server_argv(o.servers, /*standby=*/true);
  primary_argv_ = [server_argv](int i) { return server_argv(i, /*standby=*/false); };
  for (int i = 0; i < o.servers + o.standbys; ++i) {
    argv = server_argv(i, i >= o.servers);
    auto server = StartPlaced("server", i, argv);
    if (!server.ok()) return server.status();
    (*server)->index = i;
    servers_.push_back(*server);
    server_argv_.push_back(argv);
  }
  for (int i = 0; i < o.aggregators; ++i) {
    argv = {o.bin_dir + "/hetps-aggregator", "--scheduler=" + endpoint_};
    for (const std::string& flag : o.aggregator_flags) argv.push_back(WithIndex(flag, i));
    if (i < static_cast<int>(o.aggregator_own_flags.size())) {
      argv.insert(argv.end(), o.aggregator_own_flags[i].begin(), o.aggregator_own_flags[i].end());
    }
    auto aggregator = StartPlaced("aggregator", i, argv);
    if (!aggregator.ok()) return aggregator.status();
    (*aggregator)->index = i;
    aggregators_.push_back(*aggregator);
  }
  return Status();
}

StatusOr<ChildProcess*> LocalCluster::StartStandby() {
  const int index = static_cast<int>(servers_.size());
  auto server = StartPlaced("server", index, standby_argv_);
  if (!server.ok()) return server.status();
  (*server)->index = index;
  servers_.push_back(*server);
  server_argv_.push_back(standby_argv_);
  return server;
}

StatusOr<ChildProcess*> LocalCluster::StartServer() {
  const int index = static_cast<int>(servers_.size());
  std::vector<std::string> argv = primary_argv_(index);
  auto server = StartPlaced("server", index, argv);
  if (!server.ok()) return server.status();
  (*server)->index = index;
  servers_.push_back(*server);
  server_argv_.push_back(argv);
  return server;
}

StatusOr<ChildProcess*> LocalCluster::RestartScheduler() {
  if (scheduler_ == nullptr || scheduler_->running()) {
    return Status::FailedPrecondition("the scheduler was not started or is still running");
  }
  const bool keeps_state = std::any_of(
      scheduler_argv_.begin(), scheduler_argv_.end(),
      [](const std::string& a) { return a.starts_with("--data_dir=") && a.size() > 11; });
  if (!keeps_state) {
    return Status::FailedPrecondition(
        "the scheduler keeps no state (no --data_dir): it cannot resume the running cluster");
  }
  auto scheduler = StartPlaced("scheduler", -1, scheduler_argv_);
  if (!scheduler.ok()) return scheduler.status();
  scheduler_ = *scheduler;
  return scheduler;
}

StatusOr<ChildProcess*> LocalCluster::RestartServer(int index) {
  if (index < 0 || index >= static_cast<int>(servers_.size())) {
    return Status::InvalidArgument(fmt::format("no server {}", index));
  }
  if (servers_[index]->running()) {
    return Status::FailedPrecondition(fmt::format("server {} is still running", index));
  }
  auto server = StartPlaced("server", index, server_argv_[index]);
  if (!server.ok()) return server.status();
  (*server)->index = index;
  servers_[index] = *server;
  return server;
}

StatusOr<ChildProcess*> LocalCluster::StartWorker(int index, const std::vector<std::string>& flags,
                                                  const std::string& output_file,
                                                  const std::vector<std::string>& exec) {
  std::vector<std::string> argv = exec;
  if (options_.worker_command.empty()) {
    argv.push_back(options_.bin_dir + "/hetps-worker");
  } else {
    // The scheduler as this worker reaches it: a worker in a network namespace is given the
    // proxy's address by a later --scheduler flag.
    std::string scheduler = endpoint_;
    for (const std::string& f : flags) {
      if (f.starts_with("--scheduler=")) scheduler = f.substr(std::string("--scheduler=").size());
    }
    argv.insert(argv.end(), {"env", "HETPS_SCHEDULER=" + scheduler});
    argv.insert(argv.end(), options_.worker_command.begin(), options_.worker_command.end());
  }
  argv.push_back("--scheduler=" + endpoint_);
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto worker = StartPlaced("worker", index, argv, output_file);
  if (!worker.ok()) return worker;
  (*worker)->index = index;
  workers_[index] = {std::move(argv), output_file, *worker};
  return worker;
}

StatusOr<ChildProcess*> LocalCluster::RestartWorker(int index) {
  auto it = workers_.find(index);
  if (it == workers_.end()) return Status::InvalidArgument(fmt::format("no worker {}", index));
  if (it->second.process->running()) {
    return Status::FailedPrecondition(fmt::format("worker {} is still running", index));
  }
  auto worker = StartPlaced("worker", index, it->second.argv, it->second.output_file);
  if (!worker.ok()) return worker;
  (*worker)->index = index;
  it->second.process = *worker;
  return worker;
}

}  // namespace hetps
