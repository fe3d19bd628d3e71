#include "bench/recovery.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "bench/bench_cluster.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kHeartbeatTimeoutMs = 5000;  // a GiB checkpoint may stall a process for a second

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Status RunSize(int mib, const std::string& data_root) {
  const TensorSpec model{"model", {int64_t{mib} << 18}, 0};
  BenchClusterOptions options;
  options.servers = 1;
  options.workers = 1;
  options.scheduler_flags = {fmt::format("--heartbeat_timeout_ms={}", kHeartbeatTimeoutMs)};
  options.server_flags = {fmt::format("--data_dir={}/{}mib", data_root, mib), "--init=zeros",
                          "--optimizer=adam:lr=1e-3", "--checkpoint_interval_ms=3600000"};
  auto cluster = BenchCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  BenchCluster& c = **cluster;
  if (Status s = c.ConnectAndDeclare({model}, /*server_recovery_timeout_ms=*/120000); !s.ok()) {
    return s;
  }
  Client& client = *c.clients()[0];
  const int64_t n = model.NumElements();
  std::vector<float> values(n, 1e-3f);
  const auto pushing = Clock::now();
  for (int k = 0; k < 5; ++k) {  // the fourth folds each partition's log into a checkpoint
    if (Status s = client.Push(model.name, values.data(), n).Wait(); !s.ok()) return s;
  }
  const double push_s = Since(pushing);
  if (Status s = c.KillServer(0); !s.ok()) return s;
  // The restarted server takes its rank once the old one is declared dead: wait for that, so
  // the figure is the server's own recovery, not failure detection.
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * kHeartbeatTimeoutMs));
  const auto restarted = Clock::now();
  if (Status s = c.RestartServer(0); !s.ok()) return s;
  if (Status s = client.Pull(model.name, values.data(), n).Wait(); !s.ok()) return s;
  const double recovery_s = Since(restarted);
  const double held_mib = 3.0 * mib;  // values and Adam's two moments
  std::printf(
      "{\"bench\":\"recovery\",\"model_mib\":%d,\"held_mib\":%.0f,\"optimizer\":\"adam\","
      "\"durability\":\"process\",\"restart_to_serving_s\":%.2f,\"restored_gbps\":%.2f,"
      "\"pushes_s\":%.2f}\n",
      mib, held_mib, recovery_s, held_mib * 1048576.0 / recovery_s / 1e9, push_s);
  std::fflush(stdout);
  return Status();
}

}  // namespace

int RunRecoveryBench(const RecoveryBenchOptions& o) {
  char tmpl[] = "/tmp/hetps-bench-recovery-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::fprintf(stderr, "hetps-bench: cannot create a temporary folder\n");
    return 1;
  }
  int code = 0;
  for (int mib : o.mib) {
    if (Status s = RunSize(mib, tmpl); !s.ok()) {
      std::fprintf(stderr, "hetps-bench recovery: %d MiB: %s\n", mib, s.ToString().c_str());
      code = 1;
      break;
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  return code;
}

}  // namespace hetps::bench
