#include "server/server.h"

#include <fmt/format.h>

#include "server/server_loop.h"

namespace hetps {

Status ValidateServerOptions(const ServerOptions& o) {
  if (o.threads < 1 || o.threads > 64) {
    return Status::InvalidArgument(fmt::format("threads must be in [1, 64], got {}", o.threads));
  }
  if (o.max_connections_per_address < 0) {
    return Status::InvalidArgument(
        fmt::format("max_connections_per_address must be >= 0 (0: no limit), got {}",
                    o.max_connections_per_address));
  }
  if (o.max_partition_bytes < 4 || o.max_partition_bytes > (int64_t{1} << 40)) {
    return Status::InvalidArgument(
        fmt::format("max_partition_bytes must be in [4, 2^40], got {}", o.max_partition_bytes));
  }
  if (auto opt = Optimizers().Parse(o.optimizer); !opt.ok()) return opt.status();
  if (auto init = Initializer::Make(o.init); !init.ok()) return init.status();
  auto consistency = Controllers().Parse(o.consistency);
  if (!consistency.ok()) return consistency.status();
  auto aggregator = Aggregators().Parse(o.aggregator);
  if (!aggregator.ok()) return aggregator.status();
  if (auto d = ParseDurability(o.durability); !d.ok()) return d.status();
  if (o.checkpoint_interval_ms < 1) {
    return Status::InvalidArgument(
        fmt::format("checkpoint_interval_ms must be >= 1, got {}", o.checkpoint_interval_ms));
  }
  if (o.standby && (!o.data_dir.empty() || !o.restore_from.empty())) {
    return Status::InvalidArgument(
        "a standby keeps its rank's partitions in memory (it takes them from the primary): "
        "drop --data_dir and --restore_from");
  }
  return CheckCombination(*aggregator, *consistency);
}

ServerNode::ServerNode(ServerOptions options, const std::atomic<bool>& stop)
    : options_(std::move(options)), stop_(stop) {}

Status ServerNode::Run() {
  ServerLoop loop(options_, stop_);
  return loop.Run();
}

}  // namespace hetps
