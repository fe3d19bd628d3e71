// EdgeProfile: what makes edge client `rank` of a scenario unlike the others — its emulated link
// and its device's compute slowdown — drawn from the scenario's flags and the rank, so that the
// same client gets the same device and link in every run and in either language (hetps-worker
// --workload=edge, and a Python client through hetps.fed's Scenario).
//   slowdown     --slowdown times exp(device_spread |z|), z standard normal from (data_seed,
//                rank): a device never faster than the reference; with --device_table, also
//                times the table's fastest rate over the rate of the device the client draws
//                (by data_seed and the rank), that fastest rate being the reference's
//   link         the --link_* flags, or client rank's row of --link_table (drawn by link_seed
//                and the rank), bandwidths times exp(link_spread z); an evaluator (rank <
//                evaluators) measures the model, it is no edge device: its link is not emulated
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "hetps/link.h"

namespace hetps {

// The scenario's flags that shape clients (hetps-worker's of the same names).
struct EdgeProfileFlags {
  double slowdown = 1;
  double device_spread = 0;
  std::string device_table;  // a CSV of device kinds (worker/edge/device_table.h)
  double device_gflops = 1;  // the reference device's rate, without a device table
  uint64_t data_seed = 1;
  double link_up_mbps = 0, link_down_mbps = 0, link_latency_ms = 0, link_jitter_ms = 0;
  double link_loss = 0, link_rto_ms = 200;
  uint64_t link_seed = 1;
  std::string link_table;  // a CSV of link kinds (worker/link_table.h)
  double link_spread = 0;
  std::string links = "transport";  // or netns: the link is applied outside the client
  int evaluators = 0;               // ranks 0..evaluators-1 (edge workloads only)
};

// A seeded per-client factor exp(spread * z) (|z| when at_least_one), z standard normal drawn
// from (seed, rank, what).
double SpreadFactor(double spread, uint64_t seed, uint64_t what, bool at_least_one, int rank);

// What the flags cannot mean, whatever the rank (a link table is read here).
Status ValidateEdgeProfileFlags(const EdgeProfileFlags& flags);
// Client rank's compute slowdown (1 for an evaluator).
double EdgeSlowdown(const EdgeProfileFlags& flags, int rank);
// The reference device's rate in GFLOP/s (virtual time: a client computes at this over its
// slowdown): --device_gflops, or the device table's fastest.
double EdgeReferenceGflops(const EdgeProfileFlags& flags);
// The kind of device client rank drew from the device table ("" without one, or an evaluator).
std::string EdgeDeviceName(const EdgeProfileFlags& flags, int rank);
// Client rank's emulated link (none for an evaluator); fails when the link table cannot be read.
StatusOr<LinkOptions> EdgeLink(const EdgeProfileFlags& flags, int rank);

}  // namespace hetps
