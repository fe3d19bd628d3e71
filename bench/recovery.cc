#include "bench/recovery.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "bench/bench_cluster.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The server's own figure from its log: "restored ... replayed in X s" (the last one).
double RestoreSeconds(const std::string& log) {
  std::ifstream in(log);
  double seconds = -1;
  static const std::regex line(R"(restored .* replayed in ([0-9.]+) s)");
  std::smatch m;
  for (std::string l; std::getline(in, l);) {
    if (std::regex_search(l, m, line)) seconds = std::stod(m[1]);
  }
  return seconds;
}

Status RunSize(int mib, const std::string& data_root) {
  const TensorSpec model{"model", {int64_t{mib} << 18}, 0};
  // Whole-model bursts through the log keep a server busy for seconds on this machine (a GiB
  // took longer than 5 s of silence once): failure detection gets time in proportion.
  const int heartbeat_timeout_ms = 2000 + 20 * mib;
  BenchClusterOptions options;
  options.servers = 1;
  options.workers = 1;
  options.scheduler_flags = {fmt::format("--heartbeat_timeout_ms={}", heartbeat_timeout_ms)};
  options.server_flags = {fmt::format("--data_dir={}/{}mib", data_root, mib), "--init=zeros",
                          "--optimizer=adam:lr=1e-3", "--checkpoint_interval_ms=3600000",
                          "--log_level=info"};  // its "restored ... in X s" line
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
  // A training worker has pulled before: its receive buffers are warm, so the figure below is
  // the server's recovery and not the client's first large receive.
  if (Status s = client.Pull(model.name, values.data(), n).Wait(); !s.ok()) return s;
  const std::vector<float> before = values;
  if (Status s = c.KillServer(0); !s.ok()) return s;
  // The restarted server takes its rank once the old one is declared dead: wait for that, so
  // the figure is the server's own recovery, not failure detection.
  std::this_thread::sleep_for(std::chrono::milliseconds(heartbeat_timeout_ms + 1000));
  const auto restarted = Clock::now();
  if (Status s = c.RestartServer(0); !s.ok()) return s;
  if (Status s = client.Pull(model.name, values.data(), n).Wait(); !s.ok()) return s;
  const double recovery_s = Since(restarted);
  if (std::memcmp(before.data(), values.data(), before.size() * sizeof(float)) != 0) {
    return Status::Internal(fmt::format(
        "{} MiB: the restarted server serves other values than it acknowledged before", mib));
  }

  const double held_mib = 3.0 * mib;  // values and Adam's two moments
  std::printf(
      "{\"bench\":\"recovery\",\"model_mib\":%d,\"held_mib\":%.0f,\"optimizer\":\"adam\","
      "\"durability\":\"process\",\"restart_to_serving_s\":%.2f,\"restore_s\":%.2f,"
      "\"restored_gbps\":%.2f,\"pushes_s\":%.2f}\n",
      mib, held_mib, recovery_s, RestoreSeconds(c.log_path()),
      held_mib * 1048576.0 / recovery_s / 1e9, push_s);
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
