// BenchCluster: a scheduler and S server processes on loopback for a benchmark, plus W
// in-process clients. Logs go to a file in a temporary folder, printed if something fails.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/client.h"

namespace hetps::bench {

struct BenchClusterOptions {
  int servers = 1;
  int workers = 1;
  std::vector<std::string> server_flags;
  std::vector<std::string> scheduler_flags;
  std::string scheduler_bind = "tcp://127.0.0.1:*";
  // Per server, "{i}" replaced by its index: a command prefix (e.g. "ip netns exec ns{i}" to
  // put each server on its own emulated host) and the endpoint it binds.
  std::string server_exec;
  std::string server_bind = "tcp://127.0.0.1:*";
};

class BenchCluster {
 public:
  ~BenchCluster();  // stops every process it started
  static StatusOr<std::unique_ptr<BenchCluster>> Start(const BenchClusterOptions& options);
  // Start() then ConnectAndDeclare(); a failure's message names the cluster's log.
  static StatusOr<std::unique_ptr<BenchCluster>> Launch(const BenchClusterOptions& options,
                                                        const std::vector<TensorSpec>& tensors);
  // Connects the W clients together (Connect and DeclareTensors are collective).
  Status ConnectAndDeclare(const std::vector<TensorSpec>& tensors);
  std::vector<std::unique_ptr<Client>>& clients() { return clients_; }
  const std::string& log_path() const { return log_; }
  const std::string& dir() const { return dir_; }
  const std::string& endpoint() const { return endpoint_; }
  // Starts a hetps-worker process joining this cluster (its output goes to the log).
  Status StartWorker(const std::vector<std::string>& flags);
  // Waits for every worker process; fails naming the first that did not exit 0.
  Status WaitWorkers();

 private:
  BenchCluster() = default;
  StatusOr<pid_t> Spawn(const std::vector<std::string>& argv);

  std::string dir_, log_, endpoint_;
  int workers_ = 0;
  std::vector<pid_t> pids_;
  std::vector<pid_t> worker_pids_;
  std::vector<std::unique_ptr<Client>> clients_;
};

// Directory of the running executable (where the role binaries live).
std::string SelfDir();

}  // namespace hetps::bench
