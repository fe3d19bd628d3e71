// hetps-server: parses flags and runs one ServerNode.
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include "common/allocator.h"
#include "common/logging.h"
#include "common/signals.h"
#include "server/server.h"

DEFINE_string(scheduler, "", "scheduler endpoint, e.g. tcp://10.0.0.1:7000 (required)");
DEFINE_string(bind, "tcp://127.0.0.1:*", "endpoint to bind for workers ('*' = a free port)");
DEFINE_string(advertise, "", "endpoint workers dial (default: the bound endpoint)");
DEFINE_int32(server_threads, 2, "apply threads (partitions are spread over them)");
DEFINE_int64(inline_apply_bytes, 1 << 20,
             "partitions up to this size are served by the network thread itself");
DEFINE_string(optimizer, "sgd", "server-side optimizer: sgd, momentum, adam, adagrad");
DEFINE_double(lr, 0.01, "learning rate");
DEFINE_double(momentum, 0.9, "momentum coefficient (momentum)");
DEFINE_double(beta1, 0.9, "adam beta1");
DEFINE_double(beta2, 0.999, "adam beta2");
DEFINE_double(epsilon, 1e-8, "adam/adagrad epsilon");
DEFINE_double(weight_decay, 0.0, "L2 weight decay added to every gradient");
DEFINE_string(
    consistency, "asp",
    "when updates apply and reads answer: asp, bsp, ssp, dssp, backup, softsync, semi_async");
DEFINE_int64(staleness, 2, "ssp: a worker runs at most this many clocks ahead of the slowest");
DEFINE_int64(dssp_lower, 3, "dssp: lower staleness bound s_L");
DEFINE_int64(dssp_range, 12, "dssp: most extra iterations r_max (upper bound s_L + r_max)");
DEFINE_int64(backup_workers, 1,
             "backup: b; each step applies the first N - b of N workers (-1: auto, b = the "
             "workers the scheduler flags as stragglers)");
DEFINE_int64(softsync_n, 1, "softsync: n; each step takes floor(workers / n) gradients");
DEFINE_int64(round_timeout_ms, 2000,
             "semi_async: a round closes this long after its first upload, with what arrived");
DEFINE_string(quorum, "auto",
              "semi_async: K, a round closes at the K-th upload; auto: from measured intervals");
DEFINE_string(aggregator, "sum",
              "how pushes combine: sum, fedavg (with bsp), temporal (with bsp), fedbuff, fedasync");
DEFINE_string(staleness_lr, "none",
              "sum: none, or inverse (a gradient of staleness s is scaled by 1/s)");
DEFINE_string(delay_compensation, "none", "sum: none, or dcasgd");
DEFINE_double(dcasgd_lambda, 0.04, "dcasgd: lambda");
DEFINE_int32(fedbuff_k, 4, "fedbuff: deltas per server step");
DEFINE_double(staleness_exponent, 0.5, "fedbuff, fedasync polynomial, semi_async: a in (1 + s)^-a");
DEFINE_double(fedasync_alpha, 0.6, "fedasync: mixing weight alpha in (0, 1]");
DEFINE_string(fedasync_staleness, "polynomial", "fedasync: constant, polynomial, hinge");
DEFINE_double(hinge_a, 4, "fedasync hinge: a");
DEFINE_double(hinge_b, 2, "fedasync hinge: b");
DEFINE_string(init, "uniform", "initial values: zeros, uniform, normal, worker (first Init wins)");
DEFINE_double(init_scale, 0.01, "uniform: half-width; normal: standard deviation");
DEFINE_uint64(seed, 1, "seed of the server-side initializer");
DEFINE_int32(heartbeat_interval_ms, 500, "heartbeat period to the scheduler");
DEFINE_int32(join_timeout_ms, 60000, "how long to wait for the cluster to form");
DEFINE_string(log_level, "info", "debug, info, warn, error");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("hetps server: holds model partitions and applies pushes");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  hetps::TuneAllocatorForTransfers();
  hetps::SignalWatcher signals;
  if (!hetps::SetupLogging("server", FLAGS_log_level)) {
    spdlog::error("unknown --log_level '{}'", FLAGS_log_level);
    return 2;
  }
  if (FLAGS_scheduler.empty()) {
    spdlog::error("--scheduler is required (e.g. --scheduler=tcp://127.0.0.1:7000)");
    return 2;
  }
  hetps::ServerOptions o;
  o.scheduler = FLAGS_scheduler;
  o.bind = FLAGS_bind;
  o.advertise = FLAGS_advertise;
  o.threads = FLAGS_server_threads;
  o.inline_apply_bytes = FLAGS_inline_apply_bytes;
  o.optimizer = FLAGS_optimizer;
  o.optimizer_options = {FLAGS_lr,    FLAGS_momentum, FLAGS_beta1,
                         FLAGS_beta2, FLAGS_epsilon,  FLAGS_weight_decay};
  o.init = {FLAGS_init, FLAGS_init_scale, FLAGS_seed};
  o.aggregation.name = FLAGS_aggregator;
  o.aggregation.staleness_lr = FLAGS_staleness_lr;
  o.aggregation.delay_compensation = FLAGS_delay_compensation;
  o.aggregation.dcasgd_lambda = FLAGS_dcasgd_lambda;
  o.aggregation.fedbuff_k = FLAGS_fedbuff_k;
  o.aggregation.staleness_exponent = FLAGS_staleness_exponent;
  o.aggregation.fedasync_alpha = FLAGS_fedasync_alpha;
  o.aggregation.fedasync_staleness = FLAGS_fedasync_staleness;
  o.aggregation.hinge_a = FLAGS_hinge_a;
  o.aggregation.hinge_b = FLAGS_hinge_b;
  o.policy.set_consistency(FLAGS_consistency);
  o.policy.set_staleness(FLAGS_staleness);
  o.policy.set_dssp_lower(FLAGS_dssp_lower);
  o.policy.set_dssp_range(FLAGS_dssp_range);
  o.policy.set_backup_workers(FLAGS_backup_workers);
  o.policy.set_softsync_n(FLAGS_softsync_n);
  o.policy.set_staleness_exponent(FLAGS_staleness_exponent);
  o.policy.set_round_timeout_ms(FLAGS_round_timeout_ms);
  if (FLAGS_quorum != "auto") {
    char* end = nullptr;
    const long long k = std::strtoll(FLAGS_quorum.c_str(), &end, 10);
    if (FLAGS_quorum.empty() || *end != '\0' || k < 1) {
      spdlog::error("--quorum must be auto or an integer >= 1, got '{}'", FLAGS_quorum);
      return 2;
    }
    o.policy.set_quorum(k);
  }
  o.heartbeat_interval_ms = FLAGS_heartbeat_interval_ms;
  o.join_timeout_ms = FLAGS_join_timeout_ms;
  hetps::Status s = hetps::ServerNode(o, signals.stop()).Run();
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return s.code() == hetps::proto::INVALID_ARGUMENT ? 2 : 1;
  }
  return 0;
}
