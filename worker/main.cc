// hetps-worker: parses flags, joins the cluster and runs a workload through the client library.
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include "common/allocator.h"
#include "common/int_list.h"
#include "common/logging.h"
#include "common/signals.h"
#include "worker/client.h"
#include "worker/synthetic.h"

DEFINE_string(scheduler, "", "scheduler endpoint, e.g. tcp://10.0.0.1:7000 (required)");
DEFINE_string(workload, "synthetic", "what to run: synthetic (quadratic objective, known optimum)");
DEFINE_int32(iterations, 50, "iterations (pull, compute, push, clock) per worker");
DEFINE_string(tensor_elements, "100000,1000000,2500000",
              "synthetic: comma-separated element counts, one tensor each");
DEFINE_uint64(workload_seed, 7, "synthetic: seed of the per-worker targets");
DEFINE_double(compute_ms, 0, "synthetic: simulated compute time per iteration, in ms");
DEFINE_double(slowdown, 1.0,
              "multiplies this worker's compute time (>= 1): a reproducible straggler");
DEFINE_int32(progress_every, 10, "print a progress line every N iterations");
DEFINE_int32(heartbeat_interval_ms, 500, "heartbeat period to the scheduler");
DEFINE_int32(join_timeout_ms, 60000, "how long to wait for the cluster to form");
DEFINE_string(log_level, "info", "debug, info, warn, error");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("hetps worker: trains through the parameter server");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  hetps::TuneAllocatorForTransfers();
  hetps::SignalWatcher signals;
  if (!hetps::SetupLogging("worker", FLAGS_log_level)) {
    spdlog::error("unknown --log_level '{}'", FLAGS_log_level);
    return 2;
  }
  if (FLAGS_scheduler.empty()) {
    spdlog::error("--scheduler is required (e.g. --scheduler=tcp://127.0.0.1:7000)");
    return 2;
  }
  if (FLAGS_workload != "synthetic") {
    spdlog::error("unknown --workload '{}' (known: synthetic)", FLAGS_workload);
    return 2;
  }
  hetps::SyntheticOptions workload;
  auto elements = hetps::ParsePositiveList(FLAGS_tensor_elements);
  if (!elements.ok()) {
    spdlog::error("--tensor_elements: {}", elements.status().message());
    return 2;
  }
  workload.tensor_elements = *elements;
  workload.iterations = FLAGS_iterations;
  workload.compute_ms = FLAGS_compute_ms;
  workload.slowdown = FLAGS_slowdown;
  workload.seed = FLAGS_workload_seed;
  workload.progress_every = std::max(1, FLAGS_progress_every);

  hetps::ClientOptions options;
  options.scheduler = FLAGS_scheduler;
  options.heartbeat_interval_ms = FLAGS_heartbeat_interval_ms;
  options.join_timeout_ms = FLAGS_join_timeout_ms;
  options.stop = &signals.stop();
  auto client = hetps::Client::Connect(options);
  if (!client.ok()) {
    spdlog::error("cannot join the cluster: {}", client.status().ToString());
    return 1;
  }
  hetps::Status s = hetps::RunSynthetic(**client, workload, signals.stop());
  hetps::Status left = (*client)->Finish();
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return signals.stop().load() ? 130 : 1;
  }
  if (!left.ok()) spdlog::warn("leaving the cluster: {}", left.ToString());
  return 0;
}
