// hetps-worker: parses flags, joins the cluster and runs a workload through the client library.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gflags/gflags.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "common/compress/codec.h"
#include "common/daemon.h"
#include "common/int_list.h"
#include "common/logging.h"
#include "common/signals.h"
#include "hetps/client.h"
#include "worker/edge/attack.h"
#include "worker/edge/availability.h"
#include "worker/edge/edge_client.h"
#include "worker/edge/edge_profile.h"
#include "worker/link_shaper.h"
#include "worker/synthetic.h"
#include "worker/train/straggler.h"
#include "worker/train/trainer.h"
#include "worker/transport.h"

DEFINE_string(scheduler, "", "scheduler endpoint, e.g. tcp://10.0.0.1:7000 (required)");
DEFINE_string(workload, "synthetic",
              "what to run: synthetic (quadratic objective, known optimum), train (--model on "
              "Fashion-MNIST or any IDX pair) or edge (a federated client: local epochs on its "
              "own shard, its delta uploaded each round)");
DEFINE_string(model, "mlp",
              "train: mlp (784-256-128-10, see --hidden), cnn (LeNet-5 style) on Fashion-MNIST, "
              "or ctr (click-through rate over 26 sparse tables, generated data: --ctr_*)");
DEFINE_uint64(ctr_ids_per_field, 1000000, "train --model=ctr: distinct ids of each field");
DEFINE_double(ctr_zipf, 1.05, "train --model=ctr: the Zipf exponent of the fields' ids");
DEFINE_int32(ctr_dim, 16, "train --model=ctr: floats per embedding row");
DEFINE_int32(ctr_hidden, 64, "train --model=ctr: units of the MLP's hidden layer");
DEFINE_int32(ctr_test_samples, 20000, "train --model=ctr: samples of rank 0's test set");
DEFINE_string(ctr_table_optimizer, "adagrad:lr=0.1",
              "train --model=ctr: the tables' row-wise optimizer spec (the dense layers use the "
              "servers' --optimizer)");
DEFINE_string(device, "auto",
              "where to compute: auto, cpu, cuda. auto: the GPU when usable for train, the CPU "
              "for edge clients (many emulated clients would each hold a CUDA context)");
DEFINE_int32(local_rank, -1,
             "this worker's index among the workers on its host: --device=cuda computes on GPU "
             "local_rank mod the visible devices (CUDA_VISIBLE_DEVICES respected). -1: "
             "$HETPS_LOCAL_RANK (hetps launch sets it, also across hosts), $SLURM_LOCALID, "
             "else the rank");
DEFINE_int32(compute_threads, 1,
             "train: CPU threads for the model's arithmetic (more pays only on idle cores)");
DEFINE_int32(batch, 64, "train, edge: minibatch size");
DEFINE_int32(eval_every, 200,
             "train, edge: rank 0 evaluates on the test set every N clocks (edge: rounds)");
DEFINE_int64(validation, 0,
             "train: hold out N training samples (a draw seeded by --data_seed), train on the "
             "rest and evaluate on them instead of the test set (tuning never sees the test set)");
DEFINE_string(eval_mode, "live",
              "train: live (rank 0 evaluates at once and prints it) or deferred (rank 0 keeps a "
              "copy of the model at each evaluation clock and evaluates the copies after training, "
              "each row at the time the copy was taken: measuring does not slow training)");
DEFINE_string(partition, "iid",
              "train, edge: how the training set is split: iid, dirichlet, or (edge) shards");
DEFINE_int32(shards_per_client, 2,
             "edge: --partition=shards gives each client this many label-sorted shards");
DEFINE_int32(rounds, 20,
             "edge: rounds (pull, local training, upload, clock) per client; under "
             "--consistency=selected the scheduler's --rounds decides instead");
DEFINE_int32(evaluators, 0,
             "edge, federated rounds (--consistency=selected): ranks 0..N-1 measure the global "
             "model every --eval_every rounds and do not train");
DEFINE_string(availability, "always",
              "edge, federated rounds: when a client is reachable: always, or "
              "onoff:on_s=A,off_s=B (exponential online/offline periods, seeded per client)");
DEFINE_double(fail_fraction, 0,
              "edge, federated rounds: chance that a selected client fails in the middle of its "
              "work (uploads part of its delta, never reports it)");
DEFINE_double(byzantine_fraction, 0,
              "edge: emulated attackers: round(F x training clients) of them, drawn from "
              "--data_seed, run --attack (worker/edge/attack.h)");
DEFINE_string(attack, "sign_flip",
              "edge: what a Byzantine client does: sign_flip:factor=C, scale:factor=K, "
              "gaussian:std=S or label_flip (hetps-worker --list)");
DEFINE_string(dp, "none",
              "edge: client-level differential privacy (common/privacy.h): none, "
              "central:clip=C,noise=Z[,delta=D][,quantile=Q] (clients clip their updates to C, "
              "or with Q to the clip each round's task names; the servers' dp_fedavg adds the "
              "noise), local:clip=C,noise=Z[,delta=D] (each client adds "
              "noise of std Z x C to its clipped update) or distributed:... (each adds std Z x C / "
              "sqrt(K) for a round keeping K, under --secure_aggregation); updates go up "
              "unweighted");
DEFINE_int32(deep_from, -1,
             "edge: layer-wise uploads (pair with --aggregator=temporal): layers from this index "
             "on go up only on the schedule's deep rounds (-1: every layer every round)");
DEFINE_int32(deep_period, 15, "edge: the layer schedule's period P");
DEFINE_int32(deep_rounds, 5, "edge: deep layers go up on the last f rounds of each period (and 0)");
DEFINE_int32(local_epochs, 1, "edge: epochs over the client's shard per round");
DEFINE_double(local_lr, 0.05, "edge: learning rate of the client's local SGD");
DEFINE_double(prox_mu, 0, "edge: FedProx's proximal weight mu (0: plain local SGD)");
DEFINE_string(data_cache, "",
              "train, edge: folder of the decoded data set every worker maps (default "
              "$TMPDIR/hetps-data-<uid>)");
DEFINE_double(dirichlet_alpha, 0.5, "train: label skew of --partition=dirichlet (smaller: more)");
DEFINE_string(hidden, "256,128", "train: hidden layer widths");
DEFINE_uint64(data_seed, 1, "train: seed of the split, the minibatches and the initial weights");
DEFINE_string(dataset_dir, "/usr/share/datasets/fashion-mnist",
              "train: folder of {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz");
DEFINE_string(train_images, "", "train: IDX images to train on (overrides --dataset_dir)");
DEFINE_string(train_labels, "", "train: IDX labels to train on");
DEFINE_string(test_images, "", "train: IDX images to evaluate on");
DEFINE_string(test_labels, "", "train: IDX labels to evaluate on");
DEFINE_string(run_dir, "", "train: write metrics.csv, summary.json and plot.png of the run here");
DEFINE_int32(iterations, 50, "iterations (pull, compute, push, clock) per worker");
DEFINE_string(tensor_elements, "100000,1000000,2500000",
              "synthetic: comma-separated element counts, one tensor each");
DEFINE_uint64(workload_seed, 7, "synthetic: seed of the per-worker targets");
DEFINE_double(compute_ms, 0, "synthetic: simulated compute time per iteration, in ms");
DEFINE_double(slowdown, 1.0,
              "multiplies this worker's compute time (>= 1): a reproducible straggler or a "
              "slower edge device");
DEFINE_string(straggler, "none",
              "train: this worker's straggler process, seeded by --data_seed and the rank: none, "
              "persistent:factor=F, transient:every=A,length=L,factor=F (slow periods), "
              "heterogeneous:spread=S (a speed drawn per worker); multiplies --slowdown");
DEFINE_double(device_spread, 0,
              "edge: heterogeneous devices: this client's --slowdown is multiplied by "
              "exp(S |z|), z standard normal drawn from --data_seed and the rank (needs --rank)");
DEFINE_string(device_table, "",
              "edge: devices from a CSV of device kinds with their shares of the clients and "
              "their measured training throughput (worker/edge/device_table.h, e.g. "
              "deploy/edge/devices/phones.csv); each client draws one by --data_seed and its "
              "rank; its slowdown is the table's fastest rate over its own (--device_spread and "
              "--slowdown still apply), and the fastest rate is the reference device's "
              "(--device_gflops left unset)");
DEFINE_double(link_spread, 0,
              "heterogeneous links: this client's link bandwidths are multiplied by exp(S z), z "
              "standard normal drawn from --link_seed and the rank (log-normal around the "
              "given figures; needs --rank)");
DEFINE_int32(progress_every, 10, "print a progress line every N iterations");
DEFINE_int32(heartbeat_interval_ms, 500,
             "heartbeat period to the scheduler (each carries this worker's report)");
DEFINE_int32(rank, -1, "the worker rank to ask the scheduler for (-1: any free one)");
DEFINE_int32(join_timeout_ms, 60000, "how long to wait for the cluster to form");
DEFINE_int32(server_recovery_timeout_ms, 0,
             "when a server dies, how long its requests wait for it to be restarted on its "
             "--data_dir (then they are resent, each update applied once); 0: they fail at once");
DEFINE_string(transport, "auto",
              "co-located servers (this machine and network namespace): how "
              "large payloads skip the socket: cma (the server reads and writes this process's "
              "arrays), shm (a shared memory segment per server), auto (shm, else cma), socket "
              "(neither)");
DEFINE_int64(shared_memory_mib, 64,
             "the shm transport's segment per co-located server, in MiB; 0: no shm");
DEFINE_int64(batch_kib, 256,
             "requests to one server smaller than this many KiB that are sent together (a step's "
             "small tensors) leave as one message of up to this size; 0: one message each");
// The codecs named from the registry (the help text cannot fall behind it).
const std::string kCodecHelp = fmt::format(
    "push compression: SPEC for every layer (e.g. topk:density=0.01,ef=1) or per layer "
    "(default=topk:density=0.01,ef=1;layer0=none;layer3=qsgd:levels=16); codecs: {} "
    "(hetps-worker --list)",
    fmt::join(hetps::compress::Codecs().Names(), ", "));
DEFINE_string(codec, "none", kCodecHelp.c_str());
DEFINE_string(pull_codec, "none", "compression of pulled values: none or fp16");
DEFINE_double(link_up_mbps, 0,
              "emulated link to the servers: uplink megabits per second (0: unlimited)");
DEFINE_double(link_down_mbps, 0, "emulated link: downlink megabits per second (0: unlimited)");
DEFINE_double(link_latency_ms, 0, "emulated link: one-way delay, each direction");
DEFINE_double(link_jitter_ms, 0, "emulated link: deviation of the delay (normal)");
DEFINE_double(link_loss, 0,
              "emulated link: chance that a 1460-byte packet is lost and sent again after "
              "--link_rto_ms");
DEFINE_double(link_rto_ms, 200, "emulated link: retransmission timeout");
DEFINE_string(clock, "wall",
              "edge, train: wall, or virtual: the scheduler runs --clock=virtual; this worker "
              "does not sleep for its device or link but tells the scheduler when each request "
              "happens in virtual time (its link model and --device_gflops; edge: when each "
              "round's upload completes; train: the turns of each step; docs/virtual-time.md)");
DEFINE_double(device_gflops, 1.0,
              "--clock=virtual: the reference device's sustained training throughput in "
              "GFLOP/s; training on N samples takes N x the model's training FLOPs per sample / "
              "this x the worker's slowdown (train: x its straggler factor)");
DEFINE_uint64(link_seed, 1, "emulated link: seed of jitter and losses (the rank is added)");
DEFINE_string(link_table, "",
              "emulated links: a CSV of link kinds with their shares of the clients "
              "(worker/link_table.h, e.g. deploy/edge/links/ookla.csv); each client draws one by "
              "--link_seed and its rank, in place of --link_up_mbps, --link_down_mbps, "
              "--link_latency_ms, --link_jitter_ms and --link_loss (--link_spread still applies)");
DEFINE_string(links, "transport",
              "where the emulated link is applied: transport (inside this client, no "
              "privileges) or netns (hetps launch --links=netns put this client in a network "
              "namespace whose tc and delaying proxy apply it; the client only reports it)");
DEFINE_int32(print_links, 0,
             "print the emulated links of ranks 0..N-1 from these flags, one line each (rank "
             "up_mbps down_mbps latency_ms jitter_ms loss rto_ms seed), and exit");
DEFINE_bool(check_flags, false,
            "validate the flags, print what is wrong, and exit (0: valid, 2: not) without "
            "joining a cluster; hetps launch runs this for every role before starting any");

namespace {

// The flags that choose among fixed words, and the codecs.
hetps::Status CheckChoices() {
  using hetps::Status;
  if (FLAGS_workload != "synthetic" && FLAGS_workload != "train" && FLAGS_workload != "edge") {
    return Status::InvalidArgument(
        fmt::format("unknown --workload '{}' (known: synthetic, train, edge)", FLAGS_workload));
  }
  if (FLAGS_model != "mlp" && FLAGS_model != "cnn" && FLAGS_model != "ctr") {
    return Status::InvalidArgument(
        fmt::format("unknown --model '{}' (known: mlp, cnn, ctr)", FLAGS_model));
  }
  if (FLAGS_device != "auto" && FLAGS_device != "cpu" && FLAGS_device != "cuda") {
    return Status::InvalidArgument(
        fmt::format("unknown --device '{}' (known: auto, cpu, cuda)", FLAGS_device));
  }
  if (auto codecs = hetps::compress::LayerCodecs::Parse(FLAGS_codec); !codecs.ok()) {
    return Status::InvalidArgument("--codec: " + codecs.status().message());
  }
  if (FLAGS_pull_codec != "none" && FLAGS_pull_codec != "fp16") {
    return Status::InvalidArgument(
        fmt::format("--pull_codec must be none or fp16, not '{}'", FLAGS_pull_codec));
  }
  if (FLAGS_compute_threads < 1) return Status::InvalidArgument("--compute_threads must be >= 1");
  return Status();
}

hetps::StatusOr<hetps::SyntheticOptions> SyntheticFromFlags() {
  auto elements = hetps::ParsePositiveList(FLAGS_tensor_elements);
  if (!elements.ok()) {
    return hetps::Status::InvalidArgument("--tensor_elements: " + elements.status().message());
  }
  hetps::SyntheticOptions o;
  o.tensor_elements = *elements;
  o.iterations = FLAGS_iterations;
  o.compute_ms = FLAGS_compute_ms;
  o.slowdown = FLAGS_slowdown;
  o.seed = FLAGS_workload_seed;
  o.progress_every = std::max(1, FLAGS_progress_every);
  return o;
}

// What both workloads take from the flags: the data, its split and the model.
hetps::Status SetWorkload(hetps::WorkloadOptions& o) {
  auto hidden = hetps::ParsePositiveList(FLAGS_hidden, 1 << 16);
  if (!hidden.ok()) return hetps::Status::InvalidArgument("--hidden: " + hidden.status().message());
  o.hidden.assign(hidden->begin(), hidden->end());
  o.dataset_dir = FLAGS_dataset_dir;
  o.train_images = FLAGS_train_images;
  o.train_labels = FLAGS_train_labels;
  o.test_images = FLAGS_test_images;
  o.test_labels = FLAGS_test_labels;
  o.data_cache = FLAGS_data_cache;
  o.partition = FLAGS_partition;
  o.dirichlet_alpha = FLAGS_dirichlet_alpha;
  o.shards_per_client = FLAGS_shards_per_client;
  o.model = FLAGS_model;
  o.device = FLAGS_device;
  o.local_rank = FLAGS_local_rank;
  // Else the launcher's, or Slurm's (a task's index on its node).
  for (const char* variable : {"HETPS_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* env = std::getenv(variable); o.local_rank < 0 && env != nullptr) {
      o.local_rank = std::atoi(env);
    }
  }
  o.compute_threads = FLAGS_compute_threads;
  o.seed = FLAGS_data_seed;
  o.run_dir = FLAGS_run_dir;
  return hetps::Status();
}

hetps::StatusOr<hetps::TrainOptions> TrainFromFlags() {
  hetps::TrainOptions o;
  if (hetps::Status s = SetWorkload(o); !s.ok()) return s;
  o.batch = FLAGS_batch;
  o.iterations = FLAGS_iterations;
  o.eval_every = FLAGS_eval_every;
  o.eval_deferred = FLAGS_eval_mode == "deferred";
  o.validation = FLAGS_validation;
  o.progress_every = std::max(1, FLAGS_progress_every);
  o.slowdown = FLAGS_slowdown;
  o.straggler = FLAGS_straggler;
  o.virtual_clock = FLAGS_clock == "virtual";
  o.device_gflops = FLAGS_device_gflops;
  o.ctr.ids_per_field = FLAGS_ctr_ids_per_field;
  o.ctr.zipf = FLAGS_ctr_zipf;
  o.ctr.dim = FLAGS_ctr_dim;
  o.ctr.hidden = FLAGS_ctr_hidden;
  o.ctr.test_samples = FLAGS_ctr_test_samples;
  o.ctr.table_optimizer = FLAGS_ctr_table_optimizer;
  return o;
}

// The flags that make this client's device and link (worker/edge/edge_profile.h).
hetps::EdgeProfileFlags ProfileFlags() {
  hetps::EdgeProfileFlags f;
  f.slowdown = FLAGS_slowdown;
  f.device_spread = FLAGS_device_spread;
  f.device_table = FLAGS_workload == "edge" ? FLAGS_device_table : "";
  f.device_gflops = FLAGS_device_gflops;
  f.data_seed = FLAGS_data_seed;
  f.link_up_mbps = FLAGS_link_up_mbps;
  f.link_down_mbps = FLAGS_link_down_mbps;
  f.link_latency_ms = FLAGS_link_latency_ms;
  f.link_jitter_ms = FLAGS_link_jitter_ms;
  f.link_loss = FLAGS_link_loss;
  f.link_rto_ms = FLAGS_link_rto_ms;
  f.link_seed = FLAGS_link_seed;
  f.link_table = FLAGS_link_table;
  f.link_spread = FLAGS_link_spread;
  f.links = FLAGS_links;
  f.evaluators = FLAGS_workload == "edge" ? FLAGS_evaluators : 0;
  return f;
}

hetps::StatusOr<hetps::EdgeOptions> EdgeFromFlags() {
  hetps::EdgeOptions o;
  if (hetps::Status s = SetWorkload(o); !s.ok()) return s;
  if (FLAGS_device == "auto") o.device = "cpu";
  o.local.epochs = FLAGS_local_epochs;
  o.local.batch = FLAGS_batch;
  o.local.lr = FLAGS_local_lr;
  o.local.prox_mu = FLAGS_prox_mu;
  o.rounds = FLAGS_rounds;
  o.eval_every = FLAGS_eval_every;
  o.evaluators = FLAGS_evaluators;
  o.availability = FLAGS_availability;
  o.fail_fraction = FLAGS_fail_fraction;
  o.byzantine_fraction = FLAGS_byzantine_fraction;
  o.attack = FLAGS_attack;
  o.dp = FLAGS_dp;
  o.deep_from = FLAGS_deep_from;
  o.deep_period = FLAGS_deep_period;
  o.deep_rounds = FLAGS_deep_rounds;
  o.slowdown = hetps::EdgeSlowdown(ProfileFlags(), FLAGS_rank);
  o.device_kind = hetps::EdgeDeviceName(ProfileFlags(), FLAGS_rank);
  o.virtual_clock = FLAGS_clock == "virtual";
  o.device_gflops = hetps::EdgeReferenceGflops(ProfileFlags());
  auto link = hetps::EdgeLink(ProfileFlags(), FLAGS_rank);
  if (link.ok()) o.link = *link;
  return o;
}

// --print_links=N: what hetps launch --links=netns shapes each client's namespace with.
int PrintLinks() {
  for (int rank = 0; rank < FLAGS_print_links; ++rank) {
    auto link = hetps::EdgeLink(ProfileFlags(), rank);
    if (!link.ok()) {
      spdlog::error("{}", link.status().message());
      return 2;
    }
    std::printf("%d %.17g %.17g %.17g %.17g %.17g %.17g %llu\n", rank, link->up_mbps,
                link->down_mbps, link->latency_ms, link->jitter_ms, link->loss, link->rto_ms,
                static_cast<unsigned long long>(link->seed));
  }
  return 0;
}

// --clock: wall, or virtual for edge clients and trainers whose links the worker models itself.
hetps::Status CheckClock() {
  if (FLAGS_clock != "wall" && FLAGS_clock != "virtual") {
    return hetps::Status::InvalidArgument(
        fmt::format("--clock is wall or virtual, not '{}'", FLAGS_clock));
  }
  if (FLAGS_clock == "wall") return hetps::Status();
  if (FLAGS_workload != "edge" && FLAGS_workload != "train") {
    return hetps::Status::InvalidArgument(
        "--clock=virtual runs federated edge clients (--workload=edge) and trainers "
        "(--workload=train); the synthetic load measures the host");
  }
  if (FLAGS_workload == "train" && FLAGS_model == "ctr") {
    return hetps::Status::InvalidArgument(
        "--clock=virtual trains the mlp and the cnn; --model=ctr runs in wall time");
  }
  if (FLAGS_links == "netns") {
    return hetps::Status::InvalidArgument(
        "--clock=virtual models each client's link in virtual time: --links=netns would delay "
        "real messages instead");
  }
  if (!(FLAGS_device_gflops > 0)) {
    return hetps::Status::InvalidArgument("--device_gflops must be > 0");
  }
  return hetps::Status();
}

hetps::ClientOptions ClientFromFlags(const std::atomic<bool>& stop,
                                     const hetps::LinkOptions& link) {
  hetps::ClientOptions o;
  o.scheduler = FLAGS_scheduler;
  o.heartbeat_interval_ms = FLAGS_heartbeat_interval_ms;
  o.rank = FLAGS_rank;
  o.join_timeout_ms = FLAGS_join_timeout_ms;
  o.server_recovery_timeout_ms = FLAGS_server_recovery_timeout_ms;
  o.shared_memory_bytes = FLAGS_shared_memory_mib << 20;
  o.transport = FLAGS_transport;
  o.batch_bytes = FLAGS_batch_kib << 10;
  o.push_codec = FLAGS_codec;
  o.pull_codec = FLAGS_pull_codec;
  o.stop = &stop;
  o.link = link;
  const hetps::AuthFlags auth = hetps::DaemonAuthFlags();
  o.auth = auth.mode;
  o.keys_dir = auth.keys_dir;
  o.key_name = auth.key_name;
  if (FLAGS_workload == "edge") o.device_slowdown = hetps::EdgeSlowdown(ProfileFlags(), FLAGS_rank);
  // Virtual time: the link's delays are virtual (worker/edge/virtual_round.h); the transport
  // does not hold messages, and the client reports the link it models.
  o.virtual_clock = FLAGS_clock == "virtual";
  if (o.virtual_clock) {
    o.link.outside = true;
    // A turn waits until each request is answered or parked (Client::EndTurn): the I/O thread
    // matches the replies while the training thread waits.
    o.caller_io = false;
  }
  return o;
}

}  // namespace

DEFINE_bool(list, false, "print every codec, straggler and availability model and exit");
DEFINE_bool(markdown, false, "--list as Markdown tables (docs/algorithms.md)");

int main(int argc, char** argv) {
  if (!hetps::StartDaemon("worker", "hetps worker: trains through the parameter server", &argc,
                          &argv))
    return 2;
  if (FLAGS_list) {
    fmt::print("{}",
               hetps::Catalogue({{&hetps::compress::Codecs(), "--codec=NAME:key=value,..."},
                                 {&hetps::Stragglers(), "--straggler=NAME:key=value,..."},
                                 {&hetps::Availabilities(), "--availability=NAME:key=value,..."},
                                 {&hetps::Attacks(), "--attack=NAME:key=value,..."}},
                                FLAGS_markdown));
    return 0;
  }
  hetps::SignalWatcher signals;
  // Every flag must parse whichever workload runs; the chosen workload's options must be valid.
  hetps::Status valid = CheckChoices();
  auto synthetic = SyntheticFromFlags();
  auto train = TrainFromFlags();
  auto edge = EdgeFromFlags();
  for (const hetps::Status& s : {synthetic.status(), train.status(), edge.status()}) {
    if (valid.ok()) valid = s;
  }
  if (valid.ok()) valid = hetps::ValidateEdgeProfileFlags(ProfileFlags());
  if (valid.ok() && !FLAGS_device_table.empty() && FLAGS_workload != "edge") {
    valid = hetps::Status::InvalidArgument(
        "--device_table draws federated edge clients' devices (--workload=edge)");
  }
  auto link = hetps::EdgeLink(ProfileFlags(), FLAGS_rank);
  if (valid.ok()) valid = link.ok() ? hetps::ValidateLinkOptions(*link) : link.status();
  if (train.ok() && link.ok()) train->link = *link;  // modelled in virtual time
  if (valid.ok() && (FLAGS_shared_memory_mib < 0 || FLAGS_shared_memory_mib > 4096)) {
    valid = hetps::Status::InvalidArgument("--shared_memory_mib must be within [0, 4096]");
  }
  if (valid.ok()) {
    if (auto t = hetps::TransportsFor(FLAGS_transport); !t.ok()) valid = t.status();
  }
  if (valid.ok() && (FLAGS_batch_kib < 0 || FLAGS_batch_kib > 65536)) {
    valid = hetps::Status::InvalidArgument("--batch_kib must be within [0, 65536]");
  }
  if (valid.ok() && (FLAGS_device_spread > 0 || FLAGS_link_spread > 0) && FLAGS_rank < 0) {
    valid = hetps::Status::InvalidArgument(
        "device_spread and link_spread draw from the rank: give --rank (hetps launch does)");
  }
  if (valid.ok()) {
    valid = FLAGS_workload == "train"  ? hetps::ValidateTrainOptions(*train)
            : FLAGS_workload == "edge" ? hetps::ValidateEdgeOptions(*edge)
                                       : hetps::ValidateSyntheticOptions(*synthetic);
  }
  if (valid.ok()) valid = CheckClock();
  if (valid.ok()) valid = hetps::ValidateAuthFlags(hetps::DaemonAuthFlags());
  if (!valid.ok()) {
    spdlog::error("{}", valid.message());
    return 2;
  }
  if (FLAGS_print_links > 0) return PrintLinks();
  if (FLAGS_check_flags) return 0;
  if (FLAGS_scheduler.empty()) {
    spdlog::error("--scheduler is required (e.g. --scheduler=tcp://127.0.0.1:7000)");
    return 2;
  }
  const hetps::ClientOptions client_options = ClientFromFlags(signals.stop(), *link);
  if (client_options.link.enabled()) {
    spdlog::info(
        "emulated link ({}): up {:.2f} Mbit/s, down {:.2f} Mbit/s, {} ms each way, jitter {} ms, "
        "loss {}",
        client_options.virtual_clock  ? "in virtual time"
        : client_options.link.outside ? "by this client's network namespace"
                                      : "in the transport",
        client_options.link.up_mbps, client_options.link.down_mbps, client_options.link.latency_ms,
        client_options.link.jitter_ms, client_options.link.loss);
  }
  auto client = hetps::Client::Connect(client_options);
  if (!client.ok()) {
    spdlog::error("cannot join the cluster: {}", client.status().ToString());
    return 1;
  }
  hetps::NotifyReady(
      fmt::format("joined as worker {} of {}", (*client)->rank(), (*client)->num_workers()));
  // Federated rounds are asked for and reported by edge clients only; another workload's
  // pushes would be held for rounds that never close.
  const bool rounds = (*client)->scheduler_runs_rounds();
  hetps::Status s =
      rounds && FLAGS_workload != "edge"
          ? hetps::Status::InvalidArgument(fmt::format(
                "the servers run federated rounds (consistency {}): only --workload=edge "
                "clients take part in them",
                (*client)->consistency()))
      : FLAGS_workload == "train" ? hetps::RunTraining(**client, *train, signals.stop())
      : FLAGS_workload == "edge"  ? hetps::RunEdgeClient(**client, *edge, signals.stop())
                                  : hetps::RunSynthetic(**client, *synthetic, signals.stop());
  hetps::NotifyStopping();
  hetps::Status left = (*client)->Finish();
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return signals.stop().load() ? 130 : 1;
  }
  if (!left.ok()) spdlog::warn("leaving the cluster: {}", left.ToString());
  return 0;
}
