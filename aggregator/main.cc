// hetps-aggregator: parses flags and runs one AggregatorLoop (docs/aggregation-tier.md).
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include "aggregator/aggregator_loop.h"
#include "common/daemon.h"
#include "common/signals.h"

DEFINE_string(scheduler, "", "scheduler endpoint, e.g. tcp://10.0.0.1:7000 (required)");
DEFINE_string(bind, "tcp://127.0.0.1:*", "endpoint to bind for workers ('*' = a free port)");
DEFINE_string(advertise, "",
              "endpoint workers dial (default: the bound endpoint); tcp://HOST:* dials HOST at "
              "the bound port");
DEFINE_double(window_ms, -1,
              "how long a sum waits for the rest of its group, in ms (negative: by the cluster's "
              "consistency: up to 1000 ms per clock when it is synchronous, else a 2 ms window)");
DEFINE_int32(max_open, 4096,
             "open sums at most; a push beyond is refused (its worker pushes "
             "directly)");
DEFINE_int64(max_partition_bytes, int64_t{64} << 20,
             "largest partition a worker may push here; a frame over twice it (+64 KiB) closes "
             "that connection unread");
DEFINE_int32(switch_chunk, 0,
             "switch emulation: the workers stream pushes in chunks of this many fixed-point "
             "words, summed in slots as they arrive (0: whole pushes, summed in float)");
DEFINE_int32(switch_slots, 8, "switch emulation: aggregation slots per partition being summed");
DEFINE_double(switch_clip, 8,
              "switch emulation: pushed values are clipped to [-clip, clip] in fixed point");
DEFINE_int32(max_connections_per_address, 1024,
             "connections open at once from one peer IP address (0: no limit)");
DEFINE_int32(heartbeat_interval_ms, 500, "heartbeat period to the scheduler");
DEFINE_int32(join_timeout_ms, 60000, "how long to wait for the cluster to form");
DEFINE_bool(check_flags, false,
            "validate the flags, print what is wrong, and exit (0: valid, 2: not) without "
            "joining a cluster");

int main(int argc, char** argv) {
  if (!hetps::StartDaemon("aggregator",
                          "hetps aggregator: sums the pushes of the workers on its host and "
                          "sends one push per partition to the servers",
                          &argc, &argv))
    return 2;
  hetps::SignalWatcher signals(/*hangup=*/false);
  hetps::AggregatorOptions o;
  if (hetps::Status s = hetps::ValidateAuthFlags(hetps::DaemonAuthFlags()); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  o.scheduler = FLAGS_scheduler;
  o.bind = FLAGS_bind;
  o.advertise = FLAGS_advertise;
  o.window_ms = FLAGS_window_ms;
  o.max_open = FLAGS_max_open;
  o.max_partition_bytes = FLAGS_max_partition_bytes;
  o.switch_chunk = FLAGS_switch_chunk;
  o.switch_slots = FLAGS_switch_slots;
  o.switch_clip = FLAGS_switch_clip;
  o.max_connections_per_address = FLAGS_max_connections_per_address;
  o.heartbeat_interval_ms = FLAGS_heartbeat_interval_ms;
  o.join_timeout_ms = FLAGS_join_timeout_ms;
  if (hetps::Status s = hetps::ValidateAggregatorOptions(o); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  if (FLAGS_check_flags) return 0;
  if (FLAGS_scheduler.empty()) {
    spdlog::error("--scheduler is required (e.g. --scheduler=tcp://127.0.0.1:7000)");
    return 2;
  }
  auto auth = hetps::LoadDaemonAuth(hetps::KeyRole::kWorker);
  if (!auth.ok()) {
    spdlog::error("{}", auth.status().message());
    return 2;
  }
  o.auth = std::move(*auth);
  if (o.auth.curve) {  // it listens for workers: the allow-list says whose keys they are
    auto allow = hetps::AllowList::Read(hetps::DaemonAuthFlags().keys_dir + "/allow");
    if (!allow.ok()) {
      spdlog::error("{}", allow.status().message());
      return 2;
    }
    o.auth.allow = std::move(*allow);
  }
  o.insecure = hetps::InsecureListening();
  o.on_joined = hetps::NotifyReady;
  return hetps::DaemonExit(hetps::AggregatorLoop(o, signals.stop()).Run());
}
