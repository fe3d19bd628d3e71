// hetps-bench: benchmarks that start their own cluster and print JSON, one object per line.
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>

#include "bench/pushpull.h"
#include "common/allocator.h"
#include "common/int_list.h"

DEFINE_int32(servers, 1, "servers in the benchmark cluster");
DEFINE_int32(workers, 1, "workers (in-process clients)");
DEFINE_string(mb, "1,16,64", "pushpull: tensor sizes in MiB, comma-separated");
DEFINE_double(seconds, 6,
              "pushpull: measuring time per size (raw, push and pull slices alternate)");
DEFINE_int32(server_threads, 2, "apply threads per server");
DEFINE_int64(partition_bytes, 4 << 20, "largest partition, in bytes");
DEFINE_string(scheduler_bind, "tcp://127.0.0.1:*", "endpoint the scheduler binds");
DEFINE_string(server_exec, "",
              "command prefix for server {i}, e.g. 'ip netns exec hetps-s{i}' (see "
              "bench/netns_scaling.sh)");
DEFINE_string(server_bind, "tcp://127.0.0.1:*", "endpoint server {i} binds");

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "hetps-bench pushpull [--servers S --workers W --mb 1,16,64 --seconds T]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  // The same tuning as the role processes, so the raw ZeroMQ ceiling measured here benefits
  // from it exactly as the clients do.
  hetps::TuneAllocatorForTransfers();
  spdlog::set_level(spdlog::level::warn);
  if (argc != 2 || std::string(argv[1]) != "pushpull") {
    std::fprintf(stderr, "usage: %s\n", gflags::ProgramUsage());
    return 2;
  }
  hetps::bench::PushPullOptions o;
  o.servers = FLAGS_servers;
  o.workers = FLAGS_workers;
  o.seconds = FLAGS_seconds;
  o.server_threads = FLAGS_server_threads;
  o.partition_bytes = FLAGS_partition_bytes;
  o.scheduler_bind = FLAGS_scheduler_bind;
  o.server_exec = FLAGS_server_exec;
  o.server_bind = FLAGS_server_bind;
  auto sizes = hetps::ParsePositiveList(FLAGS_mb, 4096);
  if (!sizes.ok()) {
    std::fprintf(stderr, "--mb: %s\n", sizes.status().message().c_str());
    return 2;
  }
  o.mb.assign(sizes->begin(), sizes->end());
  if (o.servers < 1 || o.workers < 1 || !(o.seconds > 0)) {
    std::fprintf(stderr, "--servers, --workers and --seconds must be positive\n");
    return 2;
  }
  return hetps::bench::RunPushPull(o);
}
