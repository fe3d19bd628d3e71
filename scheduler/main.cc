// hetps-scheduler: parses flags and runs the SchedulerNode.
#include <fmt/format.h>
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include "common/daemon.h"
#include "common/logging.h"
#include "common/registry.h"
#include "common/signals.h"
#include "scheduler/layer_schedule/layer_schedule.h"
#include "scheduler/ratio/ratio.h"
#include "scheduler/scheduler.h"
#include "scheduler/selection/selection.h"

DEFINE_string(bind, "tcp://127.0.0.1:*", "endpoint to bind ('*' = a free port)");
DEFINE_string(endpoint_file, "", "write the bound endpoint to this file once listening");
DEFINE_int32(num_servers, 1, "servers expected before the cluster starts");
DEFINE_int32(num_workers, 1,
             "workers expected before the cluster starts; more may join while it runs (and a "
             "restarted worker rejoins under its rank)");
DEFINE_int32(aggregators, 0,
             "aggregators (hetps-aggregator) expected before the cluster starts: each sums the "
             "pushes of the workers on its host and sends one per partition to the servers "
             "(docs/aggregation-tier.md)");
DEFINE_int32(max_workers, 0, "live workers the cluster takes at most (0: no bound)");
DEFINE_double(join_rate, 16,
              "registrations admitted per second from one peer address once --join_burst is "
              "spent (0: no limit); beyond, a node is told to ask again");
DEFINE_int32(join_burst, 256, "registrations admitted at once from one peer address");
DEFINE_int32(max_connections_per_address, 1024,
             "connections open at once from one peer IP address; one more is shut down at once "
             "(0: no limit)");
DEFINE_int64(partition_bytes, 4 << 20, "largest partition of a tensor, in bytes");
DEFINE_int32(heartbeat_timeout_ms, 5000, "a node silent this long is declared dead");
DEFINE_int32(replicas, 0,
             "backups per server rank: standby servers (hetps-server --standby) that hold a copy "
             "of the rank's partitions and take over at once when its primary dies (0: none; "
             "docs/replication.md)");
DEFINE_int32(max_servers, 0,
             "server ranks the cluster may grow to while it trains: a server that joins once "
             "every rank is served becomes a new rank and partitions move to it, and "
             "hetps ctl drain-server (or stopping a server) moves a rank's partitions off and "
             "retires it (0: --num_servers, fixed; docs/resharding.md)");
DEFINE_string(data_dir, "",
              "keep the cluster's membership, shard map and policy here (RocksDB); restarted on "
              "it, the scheduler resumes the same cluster and no node stops");
DEFINE_int32(recovery_timeout_ms, 60000,
             "with --data_dir: how long nodes wait for a restarted scheduler before giving up");
DEFINE_string(checkpoint_dir, "",
              "where whole-run checkpoints go (<dir>/clock-N; on each server's file system); "
              "empty: hetps ctl checkpoint is refused");
DEFINE_int64(checkpoint_every_clocks, 0,
             "take a whole-run checkpoint every N clocks (0: only on hetps ctl checkpoint)");
DEFINE_int32(keep_checkpoints, 2, "complete checkpoints kept, older ones removed (0: all)");
DEFINE_string(resume_from, "",
              "a checkpoint folder to resume from: workers start at its clock (servers get "
              "--restore_from; hetps launch --resume sets both)");
DEFINE_bool(check_flags, false,
            "validate the flags, print what is wrong, and exit (0: valid, 2: not) without "
            "joining a cluster; hetps launch runs this for every role before starting any");
DEFINE_int32(http_port, -1,
             "serve /metrics, /api/status and the dashboard on this port (0: any free port, "
             "-1: off)");
DEFINE_string(http_host, "127.0.0.1", "address the HTTP status binds (0.0.0.0: every interface)");
DEFINE_string(dashboard_dir, "", "the dashboard's files (default: <bin>/../share/hetps/dashboard)");
DEFINE_double(
    straggler_factor, 1.5,
    "flag a worker whose iteration-time EWMA exceeds this multiple of the others' median");
DEFINE_double(straggler_clear_factor, 1.25,
              "a flagged worker clears once its EWMA is below this multiple (hysteresis)");
DEFINE_int32(clients_per_round, 0,
             "federated rounds (servers run --consistency=selected): uploads a round keeps, "
             "the first K to arrive (0: every selected client's)");
DEFINE_double(overcommit, 1.0,
              "federated rounds: clients selected per round, as a multiple of "
              "--clients_per_round (>= 1; the slowest are then left out)");
DEFINE_int32(round_deadline_ms, 0,
             "federated rounds: a round closes this long after it opened with the uploads that "
             "arrived (0: no deadline)");
DEFINE_int32(rounds, 20,
             "federated rounds: how many to run (0: until the clients are stopped); hetps "
             "launch gives the edge clients' --rounds to the scheduler too");
DEFINE_string(selection, "random", "federated rounds: the client selection policy");
DEFINE_int32(quorum, 1,
             "asynchronous federated learning: uploads per aggregation: 1 each on its own "
             "(fedasync, fedbuff), K > 1 groups of K as one step (FedSA: servers' aggregator "
             "sum), 0 K chosen from the clients' training times");
DEFINE_int64(late_rounds, 0,
             "federated rounds: an upload reported after its round closed is used by the next "
             "close if it is at most this many rounds late, weighted by (its round + 1) / (the "
             "closing round + 1) (FedLesScan's tolerance); 0: late uploads are dropped");
DEFINE_string(ratio, "",
              "asynchronous federated learning, AAFL: the aggregation-ratio policy, "
              "fixed:alpha=A or greedy:budget=B (uploads/s), choosing before each aggregation "
              "the share of the --concurrency clients whose earliest uploads it takes");
DEFINE_int32(concurrency, 0,
             "asynchronous federated learning (servers run --consistency=committed): at most this "
             "many clients train at once, each upload committed on its own; --rounds then counts "
             "committed uploads (0: synchronous rounds)");
DEFINE_uint64(selection_seed, 1, "federated rounds: seed of the selection policy");
DEFINE_string(clock, "wall",
              "federated rounds: wall, or virtual: the scheduler acts on the clients' requests "
              "in the order of the virtual times they carry (their device and link models), not "
              "as they arrive, so a run depends on its seeds and not on the host "
              "(docs/virtual-time.md)");
DEFINE_string(dp, "none",
              "federated rounds: the clients' differential privacy (common/privacy.h; none, "
              "central:clip=C,noise=Z[,delta=D][,quantile=Q] (Q: adaptive clipping, the clip "
              "following that quantile of the update norms; in every mode), local:..., "
              "distributed:... with --secure_aggregation): the scheduler reports the "
              "(epsilon, delta) spent in rounds.csv, /api/status and /metrics");
DEFINE_string(secure_aggregation, "off",
              "federated rounds: off, or secagg+[:clip=C,dropout=D,neighbours=K]: clients mask "
              "their uploads with pairwise masks and shared secrets (scheduler/secure_round.h), so "
              "the servers learn only each round's sum (with --concurrency: each cohort's, "
              "FedBuff's buffer; docs/secure-aggregation.md)");
DEFINE_string(rounds_csv, "", "federated rounds: write one row per closed round to this file");

DEFINE_string(layer_schedule, "every",
              "the layer-wise push schedule workers follow: every, fixed:shallow=1,deep=K, "
              "adaptive:min=1,max=8 (docs/algorithms.md); `hetps ctl set layer_schedule=SPEC` "
              "switches it live");

DEFINE_bool(list, false, "print every client selection, ratio and layer-schedule policy and exit");
DEFINE_bool(markdown, false, "--list as Markdown tables (docs/algorithms.md)");

int main(int argc, char** argv) {
  if (!hetps::StartDaemon("scheduler",
                          "hetps scheduler: membership, shard map, barriers, failure detection",
                          &argc, &argv))
    return 2;
  if (FLAGS_list) {
    fmt::print("{}",
               hetps::Catalogue({{&hetps::Selections(), "--selection=NAME:key=value,..."},
                                 {&hetps::RatioPolicies(), "--ratio=NAME:key=value,..."},
                                 {&hetps::LayerSchedules(), "--layer_schedule=NAME:key=value,..."}},
                                FLAGS_markdown));
    return 0;
  }
  hetps::SignalWatcher signals(/*hangup=*/true);  // SIGHUP: reload the allow-list
  hetps::SchedulerOptions o;
  if (hetps::Status s = hetps::ValidateAuthFlags(hetps::DaemonAuthFlags()); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  o.bind = FLAGS_bind;
  o.endpoint_file = FLAGS_endpoint_file;
  o.num_servers = FLAGS_num_servers;
  o.num_workers = FLAGS_num_workers;
  o.max_workers = FLAGS_max_workers;
  o.num_aggregators = FLAGS_aggregators;
  o.join_rate = FLAGS_join_rate;
  o.join_burst = FLAGS_join_burst;
  o.max_connections_per_address = FLAGS_max_connections_per_address;
  o.data_dir = FLAGS_data_dir;
  o.checkpoint_dir = FLAGS_checkpoint_dir;
  o.checkpoint_every_clocks = FLAGS_checkpoint_every_clocks;
  o.keep_checkpoints = FLAGS_keep_checkpoints;
  o.resume_from = FLAGS_resume_from;
  o.recovery_timeout_ms = FLAGS_recovery_timeout_ms;
  o.partition_bytes = FLAGS_partition_bytes;
  o.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
  o.replicas = FLAGS_replicas;
  o.max_servers = FLAGS_max_servers;
  o.http_port = FLAGS_http_port;
  o.http_host = FLAGS_http_host;
  o.dashboard_dir = FLAGS_dashboard_dir;
  o.straggler.factor = FLAGS_straggler_factor;
  o.straggler.clear_factor = FLAGS_straggler_clear_factor;
  o.fed.clients_per_round = FLAGS_clients_per_round;
  o.fed.overcommit = FLAGS_overcommit;
  o.fed.deadline_s = FLAGS_round_deadline_ms / 1000.0;
  o.fed.rounds = FLAGS_rounds;
  o.fed.selection = FLAGS_selection;
  o.fed.concurrency = FLAGS_concurrency;
  o.fed.quorum = FLAGS_quorum;
  o.fed.ratio = FLAGS_ratio;
  o.fed.late_rounds = FLAGS_late_rounds;
  o.fed.seed = FLAGS_selection_seed;
  o.fed.csv_path = FLAGS_rounds_csv;
  o.fed.dp = FLAGS_dp;
  o.fed.secure_aggregation = FLAGS_secure_aggregation;
  o.clock = FLAGS_clock;
  o.fed.virtual_time = FLAGS_clock == "virtual";
  o.layer_schedule = FLAGS_layer_schedule;
  if (hetps::Status s = hetps::ValidateSchedulerOptions(o); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  if (FLAGS_check_flags) return 0;
  auto auth = hetps::LoadDaemonAuth(hetps::KeyRole::kScheduler);
  if (!auth.ok()) {
    spdlog::error("{}", auth.status().message());
    return 2;
  }
  o.auth = std::move(*auth);
  hetps::ReloadAllowListOnHangup(signals, o.auth);
  o.insecure = hetps::InsecureListening();
  o.on_listening = [](const std::string& endpoint) {
    hetps::NotifyReady("listening on " + endpoint);
  };
  return hetps::DaemonExit(hetps::SchedulerNode(o, signals.stop()).Run());
}
