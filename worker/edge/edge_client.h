// The federated edge client (hetps-worker --workload=edge). It holds only its own shard of the
// training set (the pixels come from a cache file every client on the machine maps, see
// worker/train/shared_images.h), and each round it
//   1. pulls the global model w (its version travels with its later pushes as their base),
//   2. trains locally from w (worker/edge/local_training.h: E epochs of SGD, FedProx optional),
//   3. uploads its delta w - w_local per tensor with its sample count as the push's weight,
//   4. ends the round with Clock().
// How uploads combine is the servers' aggregator: fedavg under bsp (each round one step on the
// sample-weighted mean of every client's delta; with server SGD at lr 1 the new model is the
// weighted mean of the local models), fedasync or fedbuff under asp (each upload on arrival,
// weighted by its staleness). Rank 0 also evaluates the global model it pulled every
// eval_every rounds and at the end, and with a run_dir writes the final global model to
// <run_dir>/model.bin: every tensor's float32 values (little-endian), in the order of the
// model's tensors (fc0.w, fc0.b, fc1.w, ...), nothing else.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/status.h"
#include "hetps/client.h"
#include "hetps/link.h"
#include "worker/edge/local_training.h"
#include "worker/train/workload.h"

namespace hetps {

// What an edge client trains and how (its data and model: WorkloadOptions; its device is the
// CPU unless told).
struct EdgeOptions : WorkloadOptions {
  EdgeOptions() { device = "cpu"; }
  LocalTraining local;
  int rounds = 20;
  int eval_every = 5;  // rounds between rank 0's evaluations
  int evaluators = 0;  // ranks 0..evaluators-1 evaluate and do not train (selected only)
  // Federated rounds only (selected): when the client is reachable (worker/edge/availability.h)
  // and the chance that a selected client fails in the middle of its work: it trains, uploads
  // part of its delta and never reports the upload, so no round keeps it.
  std::string availability = "always";
  double fail_fraction = 0;
  // Emulated Byzantine clients (worker/edge/attack.h): round(byzantine_fraction x clients) of
  // the training clients, drawn from the seed, run `attack`.
  double byzantine_fraction = 0;
  std::string attack = "sign_flip";
  // Client-level differential privacy (common/privacy.h): the update is clipped (and, local,
  // noised) before it goes up, and pushed unweighted.
  std::string dp = "none";
  // Layer-wise uploads (worker/layer_schedule.h, ALGORITHMS.md §5): with deep_from >= 0, layers
  // from deep_from on go up only on rounds t with t mod deep_period in the last deep_rounds
  // (or 0); the shallow ones every round. Pair with the servers' --aggregator=temporal.
  int deep_from = -1;
  int deep_period = 15;
  int deep_rounds = 5;
  // Virtual time (--clock=virtual, worker/edge/virtual_round.h): the client does not sleep for
  // its device or link; each round's virtual duration comes from `link` (its emulated link, not
  // applied by the transport then) and its device: the reference device's sustained training
  // throughput `device_gflops` times 1 / slowdown. Availability counts virtual seconds.
  bool virtual_clock = false;
  double device_gflops = 1;
  std::string device_kind;  // the --device_table row this client drew, for its log
  LinkOptions link;
};

// Runs rounds until the client's clock reaches options.rounds; rank 0 prints the final test
// accuracy. Fails if the data cannot be loaded or a request fails.
Status RunEdgeClient(Client& client, const EdgeOptions& options, const std::atomic<bool>& stop);
// What RunEdgeClient refuses before it starts, checked without a cluster.
Status ValidateEdgeOptions(const EdgeOptions& options);

}  // namespace hetps
