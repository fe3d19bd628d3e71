// hetps-bench: benchmarks that start their own cluster and print JSON, one object per line.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/aggregation.h"
#include "bench/capacity.h"
#include "bench/codec.h"
#include "bench/consistency.h"
#include "bench/failover.h"
#include "bench/fed.h"
#include "bench/flood.h"
#include "bench/optimizer.h"
#include "bench/pushpull.h"
#include "bench/recovery.h"
#include "bench/reshard.h"
#include "bench/sparse.h"
#include "bench/train.h"
#include "common/int_list.h"
#include "hetps/client.h"

DEFINE_int32(servers, 0, "servers in the benchmark cluster (default: pushpull 1, consistency 2)");
DEFINE_int32(workers, 0, "workers, in-process clients (default: pushpull 1, consistency 4)");
DEFINE_string(straggler, "none",
              "train: every worker's straggler process (hetps-worker --straggler): none, "
              "persistent:factor=F, transient:every=A,length=L,factor=F, heterogeneous:spread=S");
DEFINE_double(straggler_slowdown, 3,
              "consistency: the last worker computes this many times longer");
DEFINE_double(compute_ms, 10, "consistency: simulated compute per iteration of a normal worker");
DEFINE_string(controllers, "",
              "consistency: consistency specs to run, in order, separated by ';' (default: every "
              "clock-driven controller of the registry, at its defaults)");
DEFINE_string(model, "mlp", "train, fed: the model: mlp or cnn");
DEFINE_int32(clients, 100, "fed: edge client processes");
DEFINE_string(clock, "wall",
              "fed: wall, or virtual: the hetero scenario's devices and links in virtual time "
              "(docs/virtual-time.md)");
DEFINE_int32(clients_per_round, 10, "fed: uploads each FedAvg round keeps (1.3x selected)");
DEFINE_int32(rounds, 20, "fed: rounds; capacity: whole-model push/pull rounds (default 3)");
DEFINE_int32(capacity_mib, 4096,
             "capacity: the model's parameters in MiB of float32 (4096: 1.07e9 parameters)");
DEFINE_int32(heartbeat_timeout_ms, 5000,
             "fed: the scheduler's heartbeat timeout (1000 processes starting on 2 cores need "
             "more)");
DEFINE_string(consistency, "ssp:staleness=2", "train: the servers' consistency spec");
DEFINE_int32(iterations, 1500, "train: iterations per worker");
DEFINE_double(target, 0.85, "train: test accuracy to time");
DEFINE_string(codec, "topk:density=0.01",
              "codec: the codec spec to measure; train, when given: the workers' --codec");
DEFINE_int64(elements, 16 << 20, "codec: float32 elements per encode");
DEFINE_string(device, "cpu", "codec: cpu or gpu; train: the workers' device, cpu or cuda (gpu)");
DEFINE_string(mb, "1,16,64", "pushpull: tensor sizes in MiB, comma-separated");
DEFINE_int32(tensors, 1,
             "pushpull: > 1 measures steps over this many small tensors of --kb KiB each (push "
             "all, wait, pull all, wait) against raw ZeroMQ with the same messages");
DEFINE_int32(kb, 4, "pushpull --tensors: each tensor's size in KiB");
DEFINE_string(model_mib, "256,1024", "recovery: model sizes in MiB, comma-separated");
DEFINE_double(seconds, 6,
              "pushpull: measuring time per size (raw, push and pull slices alternate)");
DEFINE_int32(server_threads, 2, "apply threads per server");
DEFINE_int64(partition_bytes, 4 << 20, "largest partition, in bytes");
DEFINE_string(scheduler_bind, "tcp://127.0.0.1:*", "endpoint the scheduler binds");
DEFINE_string(server_exec, "",
              "command prefix for server {i}, e.g. 'ip netns exec hetps-s{i}' (see "
              "bench/netns_scaling.sh)");
DEFINE_string(server_bind, "tcp://127.0.0.1:*", "endpoint server {i} binds");
DEFINE_string(durability, "memory",
              "pushpull, train: comma-separated server durability levels, each on a fresh "
              "cluster: memory (no data dir), none, process, machine (with a data dir); with "
              "memory among several, push throughput (train: samples/s) is also printed as a "
              "ratio to it");
DEFINE_int32(repeats, 1, "train: rounds of runs over the durability levels, interleaved");
DEFINE_int32(junk_peers, 4, "flood: peers sending junk frames and headers, never reading");
DEFINE_int32(half_open, 256, "flood: raw TCP connections held open mid-handshake at once");
DEFINE_int32(join_peers, 0,
             "flood: peers registering a new worker at the scheduler on a new connection each "
             "time, over and over");
DEFINE_double(max_rss_growth_mb, 0,
              "flood: exit 1 when the server's resident memory grew more than this (0: report)");
DEFINE_string(auth, "none",
              "pushpull: comma-separated transport security, each on a fresh cluster: none, "
              "curve (CURVE-encrypted, keys made for the run); with both, curve's throughput "
              "is also printed as a ratio to none's");
DEFINE_string(batch_kib, "256",
              "pushpull with --tensors: comma-separated ClientOptions::batch_bytes in KiB, each on "
              "a fresh cluster (0: one message per request)");
DEFINE_string(optimizer, "",
              "optimizer: the rules to measure, ';'-separated specs (default: sgd;momentum;adam;"
              "adagrad); pushpull: the servers' rule (default sgd:lr=1e-9); sparse: the table's "
              "(default adagrad:lr=0.01)");
DEFINE_string(dim, "16", "sparse: comma-separated row widths");
DEFINE_int64(keys_per_op, 4096, "sparse: keys per PushRows / PullRows call");
DEFINE_uint64(ids, 100000000, "sparse: distinct ids the Zipf stream draws from");
DEFINE_double(zipf, 1.05, "sparse: the Zipf exponent of the key stream");
DEFINE_int64(max_rows, 0,
             "sparse: rows per server (0: no cap; then the memory per row is measured)");
DEFINE_string(eviction, "",
              "sparse: comma-separated policies (default: none, or with "
              "--max_rows lru,lfu)");
DEFINE_int64(memory_rows, 1000000, "sparse: distinct rows loaded to measure memory per row");
DEFINE_int64(stream_ops, 2000, "sparse --max_rows: pull-and-push batches of the capped stream");
DEFINE_string(aggregator, "sum",
              "pushpull: the servers' aggregator spec (e.g. sum:compensation=dcasgd_a; a "
              "compensation that needs reads gets them from the round's pulls)");
DEFINE_string(only, "",
              "pushpull: run only this operation (push, pull or round) for --seconds per size, "
              "nothing else, to profile it (perf record -a); prints its rate and CPU per GB");
DEFINE_string(transport, "tcp",
              "pushpull: comma-separated worker-to-server transports, each on a fresh cluster: "
              "tcp (the socket), shm (payloads through shared memory), cma (the servers read "
              "and write the clients' arrays); with tcp beside shm or cma, their throughput is "
              "also printed as a ratio to tcp's beside memcpy's");

DEFINE_string(io, "caller",
              "pushpull: comma-separated, who moves the bytes (ClientOptions::caller_io): caller "
              "(the calling thread sends and handles its replies), thread (the client's I/O "
              "thread does); with both, one cluster holds a set of clients for each, slices "
              "alternating, and caller's figures are also printed as ratios to thread's "
              "(--tensors measures the first only, caller when both)");

namespace {

// --NAME=a,b as a list of `allowed` values into `out` (the first allowed when empty); false
// (having said why) when one is not allowed.
bool Choices(const char* name, const std::string& value, const std::vector<std::string>& allowed,
             std::vector<std::string>& out) {
  out.clear();
  std::stringstream items(value);
  for (std::string item; std::getline(items, item, ',');) {
    if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
      std::fprintf(stderr, "--%s: '%s' is not one of %s\n", name, item.c_str(),
                   fmt::format("{}", fmt::join(allowed, ", ")).c_str());
      return false;
    }
    out.push_back(item);
  }
  if (out.empty()) out.push_back(allowed[0]);
  return true;
}

// --durability as a list of levels; false (having said why) when one is unknown.
bool DurabilityLevels(std::vector<std::string>& out) {
  out.clear();
  std::stringstream levels(FLAGS_durability);
  for (std::string level; std::getline(levels, level, ',');) {
    if (level != "memory" && level != "none" && level != "process" && level != "machine") {
      std::fprintf(stderr, "--durability: '%s' is not memory, none, process or machine\n",
                   level.c_str());
      return false;
    }
    out.push_back(level);
  }
  if (out.empty()) {
    std::fprintf(stderr, "--durability: no level given\n");
    return false;
  }
  return true;
}

int Flood() {
  hetps::bench::FloodOptions o;
  o.seconds = FLAGS_seconds;
  o.junk_peers = FLAGS_junk_peers;
  o.half_open = FLAGS_half_open;
  o.join_peers = FLAGS_join_peers;
  o.max_rss_growth_mb = FLAGS_max_rss_growth_mb;
  if (o.junk_peers < 0 || o.half_open < 0 || o.join_peers < 0 || o.max_rss_growth_mb < 0) {
    std::fprintf(stderr,
                 "--junk_peers, --half_open, --join_peers and --max_rss_growth_mb must be >= 0\n");
    return 2;
  }
  return hetps::bench::RunFlood(o);
}

int Optimizer() {
  hetps::bench::OptimizerBenchOptions o;
  if (!FLAGS_optimizer.empty()) {
    o.optimizers.clear();
    std::stringstream specs(FLAGS_optimizer);
    for (std::string spec; std::getline(specs, spec, ';');) {
      if (!spec.empty()) o.optimizers.push_back(spec);
    }
    if (o.optimizers.empty()) {
      std::fprintf(stderr, "--optimizer: no rule given\n");
      return 2;
    }
  }
  if (!gflags::GetCommandLineFlagInfoOrDie("mb").is_default) {
    auto sizes = hetps::ParsePositiveList(FLAGS_mb, 4096);
    if (!sizes.ok()) {
      std::fprintf(stderr, "--mb: %s\n", sizes.status().message().c_str());
      return 2;
    }
    o.kib.clear();
    for (int64_t mb : *sizes) o.kib.push_back(mb * 1024);
  }
  o.seconds = std::min(FLAGS_seconds, 1.0);
  return hetps::bench::RunOptimizerBench(o);
}

int PushPull() {
  hetps::bench::PushPullOptions o;
  if (!FLAGS_optimizer.empty()) o.optimizer = FLAGS_optimizer;
  o.aggregator = FLAGS_aggregator;
  o.servers = FLAGS_servers > 0 ? FLAGS_servers : 1;
  o.workers = FLAGS_workers > 0 ? FLAGS_workers : 1;
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
  if (FLAGS_tensors < 1 || FLAGS_tensors > 100000 || FLAGS_kb < 1 || FLAGS_kb > 65536) {
    std::fprintf(stderr, "--tensors must be 1..100000 and --kb 1..65536\n");
    return 2;
  }
  o.tensors = FLAGS_tensors;
  o.kb = FLAGS_kb;
  o.batch_kib.clear();
  std::stringstream batches(FLAGS_batch_kib);
  for (std::string item; std::getline(batches, item, ',');) {
    char* end = nullptr;
    const long long kib = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || kib < 0 || kib > 65536) {
      std::fprintf(stderr, "--batch_kib: '%s' is not a size in KiB within [0, 65536]\n",
                   item.c_str());
      return 2;
    }
    o.batch_kib.push_back(kib);
  }
  if (o.batch_kib.empty()) o.batch_kib.push_back(hetps::ClientOptions{}.batch_bytes >> 10);
  if (!DurabilityLevels(o.durability)) return 2;
  if (!Choices("auth", FLAGS_auth, {"none", "curve"}, o.auth) ||
      !Choices("transport", FLAGS_transport, {"tcp", "shm", "cma"}, o.transport) ||
      !Choices("io", FLAGS_io, {"caller", "thread"}, o.io)) {
    return 2;
  }
  // Each word once, caller first (the ratio line's order; the clients of thread come last).
  const bool thread = std::find(o.io.begin(), o.io.end(), "thread") != o.io.end();
  const bool caller = std::find(o.io.begin(), o.io.end(), "caller") != o.io.end();
  o.io = caller && thread ? std::vector<std::string>{"caller", "thread"}
                          : std::vector<std::string>{o.io[0]};
  if (!FLAGS_only.empty()) {
    if (FLAGS_only != "push" && FLAGS_only != "pull" && FLAGS_only != "round") {
      std::fprintf(stderr, "--only: '%s' is not one of push, pull, round\n", FLAGS_only.c_str());
      return 2;
    }
    if (o.tensors > 1) {
      std::fprintf(stderr, "--only measures one tensor per size, not --tensors\n");
      return 2;
    }
    o.only = FLAGS_only;
  }
  return hetps::bench::RunPushPull(o);
}

int Move() {
  auto sizes = hetps::ParsePositiveList(FLAGS_mb, 4096);
  if (!sizes.ok()) {
    std::fprintf(stderr, "--mb: %s\n", sizes.status().message().c_str());
    return 2;
  }
  return hetps::bench::RunMoveBench({sizes->begin(), sizes->end()});
}

int Reshard() {
  auto sizes = hetps::ParsePositiveList(FLAGS_mb, 4096);
  if (!sizes.ok()) {
    std::fprintf(stderr, "--mb: %s\n", sizes.status().message().c_str());
    return 2;
  }
  return hetps::bench::RunReshardBench({sizes->begin(), sizes->end()});
}

int Failover() {
  hetps::bench::FailoverBenchOptions o;
  auto sizes = hetps::ParsePositiveList(FLAGS_mb, 4096);
  if (!sizes.ok()) {
    std::fprintf(stderr, "--mb: %s\n", sizes.status().message().c_str());
    return 2;
  }
  o.mib.assign(sizes->begin(), sizes->end());
  o.seconds = FLAGS_seconds;
  return hetps::bench::RunFailoverBench(o);
}

int Recovery() {
  hetps::bench::RecoveryBenchOptions o;
  auto sizes = hetps::ParsePositiveList(FLAGS_model_mib, 16384);
  if (!sizes.ok()) {
    std::fprintf(stderr, "--model_mib: %s\n", sizes.status().message().c_str());
    return 2;
  }
  o.mib.assign(sizes->begin(), sizes->end());
  return hetps::bench::RunRecoveryBench(o);
}

int Capacity() {
  hetps::bench::CapacityBenchOptions o;
  o.servers = FLAGS_servers > 0 ? FLAGS_servers : 4;
  o.model_mib = FLAGS_capacity_mib;
  o.rounds = gflags::GetCommandLineFlagInfoOrDie("rounds").is_default ? 3 : FLAGS_rounds;
  if (o.model_mib < 1 || o.rounds < 2) {
    std::fprintf(stderr, "capacity needs --capacity_mib >= 1 and --rounds >= 2\n");
    return 2;
  }
  return hetps::bench::RunCapacityBench(o);
}

int Fed() {
  hetps::bench::FedBenchOptions o;
  o.servers = FLAGS_servers > 0 ? FLAGS_servers : 2;
  o.clients = FLAGS_clients;
  o.clock = FLAGS_clock;
  o.clients_per_round = FLAGS_clients_per_round;
  o.rounds = FLAGS_rounds;
  o.model = FLAGS_model;
  o.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
  return hetps::bench::RunFedBench(o);
}

DEFINE_string(aggregators, "0",
              "train: host-local aggregator counts to compare, comma-separated, each a run of its "
              "own (e.g. 0,1; docs/aggregation-tier.md)");
DECLARE_string(links);
DECLARE_double(link_mbps);

int Train() {
  hetps::bench::TrainBenchOptions o;
  o.servers = FLAGS_servers > 0 ? FLAGS_servers : 2;
  o.workers = FLAGS_workers > 0 ? FLAGS_workers : 4;
  o.model = FLAGS_model;
  o.consistency = FLAGS_consistency;
  o.straggler_slowdown = FLAGS_straggler_slowdown;
  o.straggler = FLAGS_straggler;
  o.iterations = FLAGS_iterations;
  o.target = FLAGS_target;
  o.device = FLAGS_device == "gpu" ? "cuda" : FLAGS_device;
  if (!gflags::GetCommandLineFlagInfoOrDie("codec").is_default) o.codec = FLAGS_codec;
  if (!DurabilityLevels(o.durability)) return 2;
  if (FLAGS_repeats < 1) {
    std::fprintf(stderr, "--repeats must be >= 1\n");
    return 2;
  }
  o.repeats = FLAGS_repeats;
  o.aggregators.clear();
  std::stringstream counts(FLAGS_aggregators);
  for (std::string n; std::getline(counts, n, ',');) {
    char* end = nullptr;
    const long count = std::strtol(n.c_str(), &end, 10);
    if (n.empty() || *end != '\0' || count < 0 || count > o.workers) {
      std::fprintf(stderr, "--aggregators must be counts in [0, workers], e.g. 0,1\n");
      return 2;
    }
    o.aggregators.push_back(static_cast<int>(count));
  }
  if (o.aggregators.empty()) o.aggregators.push_back(0);
  o.links = gflags::GetCommandLineFlagInfoOrDie("links").is_default ? "none" : FLAGS_links;
  o.link_mbps = FLAGS_link_mbps;
  if ((o.links != "none" && o.links != "netns") || !(o.link_mbps > 0)) {
    std::fprintf(stderr, "--links must be none or netns, --link_mbps > 0\n");
    return 2;
  }
  return hetps::bench::RunTrainBench(o);
}

int Codec() {
  hetps::bench::CodecBenchOptions o;
  o.codec = FLAGS_codec;
  o.elements = FLAGS_elements;
  o.device = FLAGS_device;
  o.seconds = std::min(FLAGS_seconds, 3.0);
  return hetps::bench::RunCodecBench(o);
}

int Sparse() {
  hetps::bench::SparseBenchOptions o;
  o.servers = FLAGS_servers > 0 ? FLAGS_servers : 1;
  o.workers = FLAGS_workers > 0 ? FLAGS_workers : 1;
  o.dims.clear();
  std::stringstream dims(FLAGS_dim);
  for (std::string d; std::getline(dims, d, ',');) {
    if (!d.empty()) o.dims.push_back(std::atoll(d.c_str()));
  }
  o.evictions.clear();
  std::stringstream evictions(!FLAGS_eviction.empty() ? FLAGS_eviction
                              : FLAGS_max_rows > 0    ? "lru,lfu"
                                                      : "none");
  for (std::string e; std::getline(evictions, e, ',');) {
    if (!e.empty()) o.evictions.push_back(e);
  }
  o.keys_per_op = FLAGS_keys_per_op;
  o.ids = FLAGS_ids;
  o.zipf = FLAGS_zipf;
  o.max_rows = FLAGS_max_rows;
  o.memory_rows = FLAGS_memory_rows;
  o.stream_ops = FLAGS_stream_ops;
  o.seconds = FLAGS_seconds;
  if (!FLAGS_optimizer.empty()) o.optimizer = FLAGS_optimizer;
  const bool dims_ok = !o.dims.empty() && std::all_of(o.dims.begin(), o.dims.end(), [](int64_t d) {
    return d > 0 && d <= 65536;
  });
  if (!dims_ok || o.keys_per_op <= 0 || o.ids == 0 || !(o.zipf > 0) || o.max_rows < 0 ||
      o.memory_rows <= 0 || o.stream_ops <= 0 || o.evictions.empty()) {
    std::fprintf(stderr,
                 "sparse needs --dim in [1, 65536], --keys_per_op, --ids, --zipf, --memory_rows, "
                 "--stream_ops > 0 and --max_rows >= 0\n");
    return 2;
  }
  return hetps::bench::RunSparseBench(o);
}

DEFINE_string(links, "netns",
              "aggregation: netns (the server on its own emulated host, its link shaped to "
              "--link_mbps each way; needs root) or none (loopback)");
DEFINE_double(link_mbps, 1000,
              "aggregation: the rate of the server's link (and each worker host's, for the "
              "switch emulation) with --links=netns");
DEFINE_int32(switch_chunk, 16384, "aggregation: the switch emulation's words per chunk");
DEFINE_int32(switch_slots, 8, "aggregation: the switch emulation's slots per partition");

int Aggregation() {
  hetps::bench::AggregationBenchOptions o;
  if (FLAGS_workers > 0) o.workers = FLAGS_workers;
  if (!gflags::GetCommandLineFlagInfoOrDie("mb").is_default) {
    o.mb.clear();
    std::stringstream sizes(FLAGS_mb);
    for (std::string mb; std::getline(sizes, mb, ',');) o.mb.push_back(std::atof(mb.c_str()));
  }
  if (!gflags::GetCommandLineFlagInfoOrDie("rounds").is_default) o.rounds = FLAGS_rounds;
  o.links = FLAGS_links;
  o.link_mbps = FLAGS_link_mbps;
  o.partition_bytes = FLAGS_partition_bytes;
  o.switch_chunk = FLAGS_switch_chunk;
  o.switch_slots = FLAGS_switch_slots;
  const bool sizes_ok =
      !o.mb.empty() && std::all_of(o.mb.begin(), o.mb.end(), [](double mb) { return mb > 0; });
  if (o.workers < 2 || o.workers > 64 || o.rounds < 1 || !sizes_ok ||
      (o.links != "netns" && o.links != "none") || !(o.link_mbps > 0) || o.switch_chunk < 1 ||
      o.switch_chunk > (1 << 20) || o.switch_slots < 1 || o.switch_slots > 4096) {
    std::fprintf(stderr,
                 "aggregation needs --workers 2..64, --rounds >= 1, --mb sizes > 0, --links "
                 "netns|none, --link_mbps > 0, --switch_chunk 1..2^20 and --switch_slots "
                 "1..4096\n");
    return 2;
  }
  return hetps::bench::RunAggregationBench(o);
}

int Consistency() {
  hetps::bench::ConsistencyBenchOptions o;
  o.servers = FLAGS_servers > 0 ? FLAGS_servers : 2;
  o.workers = FLAGS_workers > 0 ? FLAGS_workers : 4;
  o.seconds = FLAGS_seconds;
  o.straggler_slowdown = FLAGS_straggler_slowdown;
  o.compute_ms = FLAGS_compute_ms;
  o.controllers.clear();
  std::stringstream specs(FLAGS_controllers);
  for (std::string n; std::getline(specs, n, ';');) {
    if (!n.empty()) o.controllers.push_back(n);
  }
  if (o.workers < 2 || !(o.straggler_slowdown >= 1) || o.compute_ms < 0) {
    std::fprintf(
        stderr, "consistency needs --workers >= 2, --straggler_slowdown >= 1, --compute_ms >= 0\n");
    return 2;
  }
  return hetps::bench::RunConsistencyBench(o);
}

}  // namespace

DECLARE_bool(help);
DECLARE_bool(helpshort);

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "hetps-bench pushpull [--servers S --workers W --mb 1,16,64 --seconds T] "
      "[--tensors 100 --kb 4 --batch_kib 256,0] [--transport tcp,shm,cma] [--io caller,thread]\n"
      "       hetps-bench consistency [--workers 4 --straggler_slowdown 3 --seconds T]\n"
      "       hetps-bench aggregation [--workers 8 --links=netns|none --link_mbps 1000 --mb "
      "0.9,16 --rounds 8 --switch_chunk 16384 --switch_slots 8]\n"
      "       hetps-bench train [--model mlp|cnn --workers W --consistency SPEC "
      "--straggler_slowdown F --straggler SPEC --durability memory,process --repeats N]\n"
      "       hetps-bench codec [--codec SPEC --elements N --device cpu|gpu]\n"
      "       hetps-bench optimizer [--optimizer 'sgd;adam:lr=1e-3' --mb 1,16]\n"
      "       hetps-bench fed [--clients 100 --clients_per_round 10 --rounds 20 --model mlp]\n"
      "                       [--clock=wall|virtual]\n"
      "       hetps-bench recovery [--model_mib 256,1024]\n"
      "       hetps-bench failover [--mb 16 --seconds 3]\n"
      "       hetps-bench move [--mb 1024]\n"
      "       hetps-bench reshard [--mb 1024]\n"
      "       hetps-bench capacity [--capacity_mib 4096 --servers 4 --rounds 3]\n"
      "       hetps-bench sparse [--servers 1 --workers 1 --dim 16,64 --keys_per_op 4096 --ids "
      "100000000 "
      "--zipf 1.05 --max_rows N --eviction lru,lfu]\n"
      "       hetps-bench flood [--seconds 60 --junk_peers 4 --half_open 256 --join_peers 0 "
      "--max_rss_growth_mb M]");
  gflags::ParseCommandLineNonHelpFlags(&argc, &argv, true);
  if (FLAGS_help || FLAGS_helpshort) {  // the usage and the benchmark's own flags, exit 0
    gflags::ShowUsageWithFlagsRestrict(argv[0], "bench/");
    return 0;
  }
  gflags::HandleCommandLineHelpFlags();
  // Nothing here tunes the process for transfers: the clients' Connect does (hetps/client.h),
  // as it does in any program that links the client, and every raw ZeroMQ loop runs after it.
  spdlog::set_level(spdlog::level::warn);
  const std::string command = argc == 2 ? argv[1] : "";
  if (FLAGS_servers < 0 || FLAGS_workers < 0 || !(FLAGS_seconds > 0)) {
    std::fprintf(stderr, "--servers, --workers and --seconds must be positive\n");
    return 2;
  }
  if (command == "pushpull") return PushPull();
  if (command == "consistency") return Consistency();
  if (command == "aggregation") return Aggregation();
  if (command == "train") return Train();
  if (command == "fed") return Fed();
  if (command == "codec") return Codec();
  if (command == "optimizer") return Optimizer();
  if (command == "recovery") return Recovery();
  if (command == "failover") return Failover();
  if (command == "move") return Move();
  if (command == "reshard") return Reshard();
  if (command == "capacity") return Capacity();
  if (command == "flood") return Flood();
  if (command == "sparse") return Sparse();
  std::fprintf(stderr, "usage: %s\n", gflags::ProgramUsage());
  return 2;
}
