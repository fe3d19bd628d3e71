#include "bench/bench_cluster.h"

#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace hetps::bench {

BenchCluster::~BenchCluster() {
  for (auto& c : clients_) {
    if (c) (void)c->Finish();  // a failed start leaves some unconnected
  }
  clients_.clear();
  cluster_.reset();
  supervisor_.reset();    // stops every process
  if (keep_dir_) return;  // a failure named the log in it
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(BenchClusterOptions o) {
  std::unique_ptr<BenchCluster> c(new BenchCluster());
  c->workers_ = o.workers;
  char tmpl[] = "/tmp/hetps-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::Internal("mkdtemp failed");
  c->dir_ = tmpl;
  c->log_ = c->dir_ + "/cluster.log";
  SupervisorOptions supervision;
  supervision.output = SupervisorOptions::Output::kFile;
  supervision.log_file = c->log_;
  supervision.grace_ms = 10000;
  c->supervisor_ = std::make_unique<Supervisor>(supervision);
  o.bin_dir = SelfDir();
  o.work_dir = c->dir_;
  o.scheduler_flags.insert(o.scheduler_flags.begin(), "--log_level=warn");
  o.server_flags.insert(o.server_flags.begin(), "--log_level=warn");
  c->cluster_ = std::make_unique<LocalCluster>(*c->supervisor_, o);
  if (Status s = c->cluster_->Start(); !s.ok()) {
    return Status(s.code(), fmt::format("{} (see {})", s.message(), c->log_));
  }
  return c;
}

Status BenchCluster::StartWorker(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {"--log_level=warn"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto worker = cluster_->StartWorker(static_cast<int>(worker_processes_.size()), argv);
  if (!worker.ok()) return worker.status();
  worker_processes_.push_back(*worker);
  return Status();
}

std::vector<pid_t> BenchCluster::Pids() const {
  std::vector<pid_t> pids = {cluster_->scheduler()->pid};
  for (const ChildProcess* s : cluster_->servers()) pids.push_back(s->pid);
  for (const ChildProcess* w : worker_processes_) pids.push_back(w->pid);
  return pids;
}

Status BenchCluster::WaitWorkers() {
  Status result;
  for (ChildProcess* worker : worker_processes_) {
    while (worker->running()) supervisor_->WaitExit(*worker, std::chrono::hours(1));
    if (result.ok() && !worker->succeeded()) {
      result = Status::Internal(fmt::format("{} (pid {}) {} (see {})", worker->label, worker->pid,
                                            worker->Describe(), log_));
    }
  }
  worker_processes_.clear();
  if (!result.ok()) keep_dir_ = true;
  return result;
}

StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Launch(const BenchClusterOptions& options,
                                                             const std::vector<TensorSpec>& tensors,
                                                             const AuthFlags& auth,
                                                             const TransferOptions& transfer) {
  auto cluster = Start(options);
  if (!cluster.ok()) return cluster;
  if (Status s = (*cluster)->ConnectAndDeclare(tensors, 0, auth, transfer); !s.ok()) {
    return Status(s.code(), fmt::format("{} (cluster log: {})", s.message(), (*cluster)->log_));
  }
  return cluster;
}

Status BenchCluster::ConnectAndDeclare(const std::vector<TensorSpec>& tensors,
                                       int server_recovery_timeout_ms, const AuthFlags& auth,
                                       const TransferOptions& transfer) {
  clients_.resize(workers_);
  std::vector<Status> results(workers_);
  std::vector<std::thread> threads;
  for (int i = 0; i < workers_; ++i) {
    threads.emplace_back([&, i] {
      if (transfer.enter) {
        if (Status s = transfer.enter(i); !s.ok()) return (void)(results[i] = s);
      }
      ClientOptions o;
      o.scheduler = cluster_->endpoint();
      o.join_timeout_ms = 30000;
      o.server_recovery_timeout_ms = server_recovery_timeout_ms;
      o.auth = auth.mode;
      o.keys_dir = auth.keys_dir;
      o.key_name = auth.key_name;
      o.transport = transfer.transport;
      o.shared_memory_bytes = transfer.shared_memory_bytes;
      o.batch_bytes = transfer.batch_bytes;
      o.caller_io = i < workers_ - transfer.thread_io_clients;
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

Status BenchCluster::KillServer(int i) {
  ChildProcess* server = cluster_->servers().at(i);
  if (server->running()) kill(server->pid, SIGKILL);
  if (!supervisor_->WaitExit(*server, std::chrono::seconds(30)).has_value()) {
    return Status::Internal(fmt::format("server {} did not exit after SIGKILL", i));
  }
  return Status();
}

Status BenchCluster::RestartServer(int i) { return cluster_->RestartServer(i).status(); }

Status BenchCluster::StartStandby() { return cluster_->StartStandby().status(); }

int BenchCluster::Ctl(const std::string& args) const {
  const std::string cmd = fmt::format("'{}/hetps' ctl --scheduler={} {} >>'{}' 2>&1", SelfDir(),
                                      endpoint(), args, log_);
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace hetps::bench
