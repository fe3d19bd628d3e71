#include "scheduler/scheduler.h"

#include <fmt/format.h>

#include "scheduler/scheduler_loop.h"

namespace hetps {

Status ValidateSchedulerOptions(const SchedulerOptions& o) {
  if (o.num_servers < 1 || o.num_workers < 1) {
    return Status::InvalidArgument("num_servers and num_workers must be >= 1");
  }
  if (o.max_workers != 0 && (o.max_workers < o.num_workers || o.max_workers > kMaxWorkerRanks)) {
    return Status::InvalidArgument(fmt::format(
        "max_workers must be 0 (no bound) or in [num_workers, {}], got {} (num_workers {})",
        kMaxWorkerRanks, o.max_workers, o.num_workers));
  }
  if (o.num_aggregators < 0 || o.num_aggregators > o.num_workers) {
    return Status::InvalidArgument(fmt::format(
        "aggregators must be in [0, num_workers] (each sums some workers' pushes), got {}",
        o.num_aggregators));
  }
  if (o.replicas < 0 || o.replicas > 3) {
    return Status::InvalidArgument(
        fmt::format("replicas must be in [0, 3] (backups per server rank), got {}", o.replicas));
  }
  if (o.max_servers != 0 &&
      (o.max_servers < o.num_servers || o.replicas > 0 || o.num_aggregators > 0)) {
    return Status::InvalidArgument(fmt::format(
        "max_servers must be 0 or at least num_servers ({}), without replicas or aggregators "
        "(docs/resharding.md), got {}",
        o.num_servers, o.max_servers));
  }
  if (o.max_connections_per_address < 0) {
    return Status::InvalidArgument(
        fmt::format("max_connections_per_address must be >= 0 (0: no limit), got {}",
                    o.max_connections_per_address));
  }
  if (!(o.join_rate >= 0) || o.join_burst < 1) {
    return Status::InvalidArgument(
        fmt::format("need join_rate >= 0 (0: no limit) and join_burst >= 1, got {} and {}",
                    o.join_rate, o.join_burst));
  }
  if (o.checkpoint_every_clocks < 0 || o.keep_checkpoints < 0) {
    return Status::InvalidArgument("checkpoint_every_clocks and keep_checkpoints must be >= 0");
  }
  if (o.checkpoint_every_clocks > 0 && o.checkpoint_dir.empty()) {
    return Status::InvalidArgument("checkpoint_every_clocks needs a --checkpoint_dir");
  }
  if (o.partition_bytes < 4) return Status::InvalidArgument("partition_bytes must be >= 4");
  if (Status s = ValidateFedRoundsOptions(o.fed); !s.ok()) return s;
  if (o.clock != "wall" && o.clock != "virtual") {
    return Status::InvalidArgument(fmt::format("--clock is wall or virtual, not '{}'", o.clock));
  }
  if (o.clock == "virtual" && !o.data_dir.empty()) {
    return Status::InvalidArgument(
        "--clock=virtual runs without --data_dir: the virtual clock's held requests and bounds "
        "are not kept across a scheduler restart");
  }
  if (o.clock == "virtual" && o.layer_schedule != "every") {
    return Status::InvalidArgument(
        "--clock=virtual: the layer schedule reaches workers on heartbeats, at host times, so "
        "a run would depend on the host; run it with --layer_schedule=every");
  }
  if (o.fed.dp != "none" && o.layer_schedule.substr(0, o.layer_schedule.find(':')) != "every") {
    return Status::InvalidArgument(
        "--dp clips each round's whole update: run it with --layer_schedule=every (a layer sent "
        "later would carry several rounds' deltas, beyond the clip bound)");
  }
  if (ParseSecureAggregation(o.fed.secure_aggregation)->on) {  // parsed by the check above
    if (!o.data_dir.empty()) {
      return Status::InvalidArgument(
          "--secure_aggregation runs without --data_dir: a round's keys and shares live only in "
          "the scheduler's memory, and a restarted scheduler could not unmask it");
    }
    if (o.layer_schedule.substr(0, o.layer_schedule.find(':')) != "every") {
      return Status::InvalidArgument(
          "--secure_aggregation masks every layer of an upload together: run it with "
          "--layer_schedule=every");
    }
  }
  if (auto spec = LayerSchedules().Parse(o.layer_schedule); !spec.ok()) {
    return Status::InvalidArgument(fmt::format("--layer_schedule: {}", spec.status().message()));
  }
  if (o.http_port < -1 || o.http_port > 65535) {
    return Status::InvalidArgument(fmt::format(
        "http_port must be -1 (off), 0 (any free port) or a port, got {}", o.http_port));
  }
  if (!(o.straggler.factor > 1) || !(o.straggler.clear_factor >= 1) ||
      o.straggler.clear_factor > o.straggler.factor) {
    return Status::InvalidArgument(fmt::format(
        "need straggler_factor > 1 and 1 <= straggler_clear_factor <= it, got {} and {}",
        o.straggler.factor, o.straggler.clear_factor));
  }
  return Status();
}

SchedulerNode::SchedulerNode(SchedulerOptions options, const std::atomic<bool>& stop)
    : options_(std::move(options)), stop_(stop) {}

Status SchedulerNode::Run() {
  SchedulerLoop loop(options_, stop_);
  return loop.Run();
}

}  // namespace hetps
