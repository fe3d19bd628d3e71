#include "bench/bench_cluster.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/subprocess.h"

namespace hetps::bench {

namespace fs = std::filesystem;

std::string SelfDir() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path().string();
}

BenchCluster::~BenchCluster() {
  for (auto& c : clients_) {
    if (c) (void)c->Finish();  // a failed start leaves some unconnected
  }
  clients_.clear();
  for (pid_t pid : pids_) kill(pid, SIGTERM);
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

StatusOr<pid_t> BenchCluster::Spawn(const std::vector<std::string>& argv) {
  SpawnOptions options;
  options.output_file = log_;
  options.search_path = true;  // a prefix such as "ip" is found on PATH
  auto pid = hetps::Spawn(argv, options);
  if (!pid.ok()) return Status(pid.status().code(), "cannot start " + pid.status().message());
  pids_.push_back(*pid);
  return pid;
}

namespace {

std::string WithIndex(std::string text, int i) {
  for (size_t at; (at = text.find("{i}")) != std::string::npos;) {
    text.replace(at, 3, std::to_string(i));
  }
  return text;
}

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(const BenchClusterOptions& o) {
  std::unique_ptr<BenchCluster> c(new BenchCluster());
  c->workers_ = o.workers;
  char tmpl[] = "/tmp/hetps-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::Internal("mkdtemp failed");
  c->dir_ = tmpl;
  c->log_ = c->dir_ + "/cluster.log";
  const std::string bin = SelfDir();
  const std::string endpoint_file = c->dir_ + "/endpoint";
  std::vector<std::string> sched = {bin + "/hetps-scheduler",
                                    fmt::format("--num_servers={}", o.servers),
                                    fmt::format("--num_workers={}", o.workers),
                                    "--bind=" + o.scheduler_bind,
                                    "--endpoint_file=" + endpoint_file,
                                    "--log_level=warn"};
  sched.insert(sched.end(), o.scheduler_flags.begin(), o.scheduler_flags.end());
  if (auto pid = c->Spawn(sched); !pid.ok()) return pid.status();
  for (int i = 0; i < 500 && c->endpoint_.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(endpoint_file);
    std::getline(in, c->endpoint_);
  }
  if (c->endpoint_.empty()) {
    return Status::Unavailable("the scheduler did not start; see " + c->log_);
  }
  for (int i = 0; i < o.servers; ++i) {
    std::vector<std::string> argv = Words(WithIndex(o.server_exec, i));
    argv.insert(argv.end(), {bin + "/hetps-server", "--scheduler=" + c->endpoint_,
                             "--bind=" + WithIndex(o.server_bind, i), "--log_level=warn"});
    argv.insert(argv.end(), o.server_flags.begin(), o.server_flags.end());
    if (auto pid = c->Spawn(argv); !pid.ok()) return pid.status();
  }
  return c;
}

Status BenchCluster::StartWorker(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {SelfDir() + "/hetps-worker", "--scheduler=" + endpoint_,
                                   "--log_level=warn"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto pid = Spawn(argv);
  if (!pid.ok()) return pid.status();
  worker_pids_.push_back(*pid);
  return Status();
}

Status BenchCluster::WaitWorkers() {
  Status result;
  for (pid_t pid : worker_pids_) {
    int st = 0;
    waitpid(pid, &st, 0);
    std::erase(pids_, pid);
    if (result.ok() && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      result = Status::Internal(fmt::format("worker pid {} failed (see {})", pid, log_));
    }
  }
  worker_pids_.clear();
  return result;
}

StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Launch(
    const BenchClusterOptions& options, const std::vector<TensorSpec>& tensors) {
  auto cluster = Start(options);
  if (!cluster.ok()) return cluster;
  if (Status s = (*cluster)->ConnectAndDeclare(tensors); !s.ok()) {
    return Status(s.code(), fmt::format("{} (cluster log: {})", s.message(), (*cluster)->log_));
  }
  return cluster;
}

Status BenchCluster::ConnectAndDeclare(const std::vector<TensorSpec>& tensors) {
  clients_.resize(workers_);
  std::vector<Status> results(workers_);
  std::vector<std::thread> threads;
  for (int i = 0; i < workers_; ++i) {
    threads.emplace_back([&, i] {
      ClientOptions o;
      o.scheduler = endpoint_;
      o.join_timeout_ms = 30000;
      auto client = Client::Connect(o);
      if (!client.ok()) {
        results[i] = client.status();
        return;
      }
      clients_[i] = std::move(*client);
      results[i] = clients_[i]->DeclareTensors(tensors);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status();
}

}  // namespace hetps::bench
