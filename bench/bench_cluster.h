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

class BenchCluster {
 public:
  ~BenchCluster();  // stops every process it started
  static StatusOr<std::unique_ptr<BenchCluster>> Start(
      int servers, int workers, const std::vector<std::string>& server_flags,
      const std::vector<std::string>& scheduler_flags);
  // Connects the W clients together (Connect and DeclareTensors are collective).
  Status ConnectAndDeclare(const std::vector<TensorSpec>& tensors);
  std::vector<std::unique_ptr<Client>>& clients() { return clients_; }
  const std::string& log_path() const { return log_; }

 private:
  BenchCluster() = default;
  pid_t Spawn(const std::vector<std::string>& argv);

  std::string dir_, log_, endpoint_;
  int workers_ = 0;
  std::vector<pid_t> pids_;
  std::vector<std::unique_ptr<Client>> clients_;
};

// Directory of the running executable (where the role binaries live).
std::string SelfDir();

}  // namespace hetps::bench
