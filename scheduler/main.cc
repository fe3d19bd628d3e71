// hetps-scheduler: parses flags and runs the SchedulerNode.
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include "common/logging.h"
#include "common/signals.h"
#include "scheduler/scheduler.h"

DEFINE_string(bind, "tcp://127.0.0.1:*", "endpoint to bind ('*' = a free port)");
DEFINE_string(endpoint_file, "", "write the bound endpoint to this file once listening");
DEFINE_int32(num_servers, 1, "servers expected before the cluster starts");
DEFINE_int32(num_workers, 1, "workers expected before the cluster starts");
DEFINE_int64(partition_bytes, 4 << 20, "largest partition of a tensor, in bytes");
DEFINE_int32(heartbeat_timeout_ms, 5000, "a node silent this long is declared dead");
DEFINE_string(log_level, "info", "debug, info, warn, error");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("hetps scheduler: membership, shard map, barriers, failure detection");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  hetps::SignalWatcher signals;
  if (!hetps::SetupLogging("scheduler", FLAGS_log_level)) {
    spdlog::error("unknown --log_level '{}'", FLAGS_log_level);
    return 2;
  }
  hetps::SchedulerOptions o;
  o.bind = FLAGS_bind;
  o.endpoint_file = FLAGS_endpoint_file;
  o.num_servers = FLAGS_num_servers;
  o.num_workers = FLAGS_num_workers;
  o.partition_bytes = FLAGS_partition_bytes;
  o.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
  hetps::Status s = hetps::SchedulerNode(o, signals.stop()).Run();
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return s.code() == hetps::proto::INVALID_ARGUMENT ? 2 : 1;
  }
  return 0;
}
