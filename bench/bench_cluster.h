// BenchCluster: a LocalCluster (scheduler and S server processes on loopback) for a benchmark,
// plus W in-process clients. Every process writes to one log in a temporary folder, named
// when something fails.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/auth.h"
#include "common/local_cluster.h"
#include "common/status.h"
#include "common/supervisor.h"
#include "hetps/client.h"

namespace hetps::bench {

// bin_dir and work_dir are filled in by BenchCluster.
using BenchClusterOptions = LocalClusterOptions;

// How the in-process clients move data (ClientOptions of the same names).
struct TransferOptions {
  std::string transport = ClientOptions{}.transport;  // "socket": as from another machine
  int64_t shared_memory_bytes = ClientOptions{}.shared_memory_bytes;  // 0: TCP only
  int64_t batch_bytes = ClientOptions{}.batch_bytes;                  // 0: a message per request
  // The last this many clients connect with ClientOptions::caller_io false (the others true).
  int thread_io_clients = 0;
  // Run by client i's connecting thread first (ServerHost::EnterWorkerHost); null: nothing.
  std::function<Status(int)> enter = nullptr;
};

class BenchCluster {
 public:
  ~BenchCluster();  // finishes the clients, then stops every process it started
  static StatusOr<std::unique_ptr<BenchCluster>> Start(BenchClusterOptions options);
  // Start() then ConnectAndDeclare(); a failure's message names the cluster's log.
  // `auth`: what the in-process clients connect with (the processes take their own flags);
  // `transfer`: their transport settings.
  static StatusOr<std::unique_ptr<BenchCluster>> Launch(const BenchClusterOptions& options,
                                                        const std::vector<TensorSpec>& tensors,
                                                        const AuthFlags& auth = {},
                                                        const TransferOptions& transfer = {});
  // Connects the W clients together (Connect and DeclareTensors are collective); their requests
  // to a dead server wait `server_recovery_timeout_ms` for its restart.
  Status ConnectAndDeclare(const std::vector<TensorSpec>& tensors,
                           int server_recovery_timeout_ms = 0, const AuthFlags& auth = {},
                           const TransferOptions& transfer = {});
  // SIGKILLs server `i` and waits for it to exit.
  Status KillServer(int i);
  // Starts server `i` again with its flags (after it exited).
  Status RestartServer(int i);
  // Starts one more standby server (the scheduler needs --replicas).
  Status StartStandby();
  // Runs `hetps ctl` against this cluster (its output goes to the log); returns its exit code.
  int Ctl(const std::string& args) const;
  std::vector<std::unique_ptr<Client>>& clients() { return clients_; }
  const std::string& log_path() const { return log_; }
  const std::string& dir() const { return dir_; }
  const std::string& endpoint() const { return cluster_->endpoint(); }
  // Starts a hetps-worker process joining this cluster (its output goes to the log).
  Status StartWorker(const std::vector<std::string>& flags);
  // Waits for every worker process; fails naming the first that did not exit 0.
  Status WaitWorkers();
  // The pids of the scheduler, the servers and the worker processes started, in that order.
  std::vector<pid_t> Pids() const;

 private:
  BenchCluster() = default;

  std::string dir_, log_;
  int workers_ = 0;
  bool keep_dir_ = false;  // a failure named the log: the folder stays
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<LocalCluster> cluster_;
  std::vector<ChildProcess*> worker_processes_;
  std::vector<std::unique_ptr<Client>> clients_;
};

}  // namespace hetps::bench
