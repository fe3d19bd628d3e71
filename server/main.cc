// hetps-server: parses flags and runs one ServerNode.
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

#include "common/allocator.h"
#include "common/daemon.h"
#include "common/logging.h"
#include "common/signals.h"
#include "server/algorithms.h"
#include "server/fault_point.h"
#include "server/server.h"

DEFINE_string(scheduler, "", "scheduler endpoint, e.g. tcp://10.0.0.1:7000 (required)");
DEFINE_string(bind, "tcp://127.0.0.1:*", "endpoint to bind for workers ('*' = a free port)");
DEFINE_string(advertise, "",
              "endpoint workers dial (default: the bound endpoint); tcp://HOST:* dials HOST at "
              "the bound port");
DEFINE_int32(server_threads, 2, "apply threads (partitions are spread over them)");
DEFINE_int64(inline_apply_bytes, 1 << 20,
             "partitions up to this size are served by the network thread itself");
DEFINE_string(optimizer, "sgd",
              "server-side update rule, a spec such as adam:lr=1e-3,beta1=0.9 (--list shows all)");
DEFINE_string(consistency, "asp",
              "when updates apply and reads answer, a spec such as ssp:staleness=4 (--list)");
DEFINE_string(aggregator, "sum",
              "how pushes combine, a spec such as fedbuff:k=8,exponent=0.5 (--list)");
DEFINE_string(init, "uniform", "initial values: zeros, uniform, normal, worker (first Init wins)");
DEFINE_double(init_scale, 0.01, "uniform: half-width; normal: standard deviation");
DEFINE_uint64(seed, 1, "seed of the server-side initializer");
DEFINE_int32(heartbeat_interval_ms, 500, "heartbeat period to the scheduler");
DEFINE_int32(join_timeout_ms, 60000, "how long to wait for the cluster to form");
DEFINE_string(data_dir, "",
              "keep this server's shards in RocksDB here (a restart with the same folder "
              "restores them); empty: in memory only");
DEFINE_string(durability, "process",
              "with --data_dir, what an acknowledged update survives: none (checkpoints only), "
              "process (a killed server; logged before the reply), machine (a power loss; the "
              "log is synced before the reply)");
DEFINE_int64(max_partition_bytes, int64_t{64} << 20,
             "largest partition the shard map may give this server; a worker's frame over twice "
             "it (+64 KiB) closes that connection unread");
DEFINE_int32(max_connections_per_address, 1024,
             "connections open at once from one peer IP address; one more is shut down at once "
             "(0: no limit)");
DEFINE_int64(checkpoint_interval_ms, 10000,
             "with --data_dir, how often each partition's log is folded into a checkpoint");
DEFINE_string(restore_from, "",
              "a whole-run checkpoint folder (runs/<run>/checkpoints/clock-N) to start from: the "
              "model, optimizer state and clocks as they stood there (hetps launch --resume)");
DEFINE_bool(standby, false,
            "join as a backup of a server rank (the scheduler runs with --replicas): hold a copy "
            "of its partitions, kept current by its primary, and take its place when it dies");
DEFINE_bool(check_flags, false,
            "validate the flags, print what is wrong, and exit (0: valid, 2: not) without "
            "joining a cluster; hetps launch runs this for every role before starting any");
DEFINE_bool(list, false, "print every consistency, aggregator, optimizer and codec and exit");
DEFINE_bool(markdown, false, "--list as Markdown tables (docs/algorithms.md)");

int main(int argc, char** argv) {
  if (!hetps::StartDaemon("server", "hetps server: holds model partitions and applies pushes",
                          &argc, &argv))
    return 2;
  if (FLAGS_list) {
    fmt::print("{}", hetps::AlgorithmCatalogue(FLAGS_markdown));
    return 0;
  }
  hetps::TuneAllocatorForTransfers();
  hetps::SignalWatcher signals(/*hangup=*/true);  // SIGHUP: reload the allow-list
  if (const char* crash = std::getenv("HETPS_CRASH_AT"); crash != nullptr && *crash != '\0') {
    if (!hetps::CrashAt(crash)) {
      std::fprintf(stderr, "hetps-server: HETPS_CRASH_AT='%s' is not point:n\n", crash);
      return 2;
    }
  }
  hetps::ServerOptions o;
  if (hetps::Status s = hetps::ValidateAuthFlags(hetps::DaemonAuthFlags()); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  o.scheduler = FLAGS_scheduler;
  o.bind = FLAGS_bind;
  o.advertise = FLAGS_advertise;
  o.threads = FLAGS_server_threads;
  o.inline_apply_bytes = FLAGS_inline_apply_bytes;
  o.optimizer = FLAGS_optimizer;
  o.consistency = FLAGS_consistency;
  o.aggregator = FLAGS_aggregator;
  o.init = {FLAGS_init, FLAGS_init_scale, FLAGS_seed};
  o.data_dir = FLAGS_data_dir;
  o.restore_from = FLAGS_restore_from;
  o.durability = FLAGS_durability;
  o.checkpoint_interval_ms = FLAGS_checkpoint_interval_ms;
  o.max_partition_bytes = FLAGS_max_partition_bytes;
  o.max_connections_per_address = FLAGS_max_connections_per_address;
  o.standby = FLAGS_standby;
  if (hetps::Status s = hetps::ValidateServerOptions(o); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  if (FLAGS_check_flags) return 0;
  if (FLAGS_scheduler.empty()) {
    spdlog::error("--scheduler is required (e.g. --scheduler=tcp://127.0.0.1:7000)");
    return 2;
  }
  o.heartbeat_interval_ms = FLAGS_heartbeat_interval_ms;
  o.join_timeout_ms = FLAGS_join_timeout_ms;
  auto auth = hetps::LoadDaemonAuth(hetps::KeyRole::kServer);
  if (!auth.ok()) {
    spdlog::error("{}", auth.status().message());
    return 2;
  }
  o.auth = std::move(*auth);
  hetps::ReloadAllowListOnHangup(signals, o.auth);
  o.insecure = hetps::InsecureListening();
  o.on_joined = hetps::NotifyReady;
  return hetps::DaemonExit(hetps::ServerNode(o, signals.stop()).Run());
}
