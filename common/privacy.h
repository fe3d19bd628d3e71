// Client-level differential privacy for federated rounds (--dp, ALGORITHMS.md §12; DP-FedAvg,
// McMahan et al., ICLR'18): every client clips its update (all tensors together) to L2 norm
// `clip` and uploads it unweighted, so that adding or removing one client moves a round's sum by
// at most `clip`; Gaussian noise of standard deviation noise x clip then hides it:
//   none                              no clipping, no noise
//   central:clip=C,noise=Z[,delta=D]  the servers add the noise to each round's sum
//                                     (--aggregator=dp_fedavg, which hetps fed sets)
//   local:clip=C,noise=Z[,delta=D]    each client adds it to its own update before uploading
//   distributed:clip=C,noise=Z[,delta=D]  each client adds its share, std noise x clip / sqrt(K)
//                                     for a round keeping K uploads, so that the sum the servers
//                                     learn under --secure_aggregation carries the central amount
// The clip may follow a quantile of the update norms instead (quantile=Q, clip_lr, count_noise:
// adaptive clipping, common/adaptive_clip.h), in every mode; the scheduler sends each round's
// clip with its task (and, under local or distributed DP, the noise the clients add), and under
// central DP the servers each round's noise with its close.
// The scheduler's accountant (common/rdp_accountant.h) reports the (epsilon, delta) spent.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "common/registry.h"

namespace hetps {

struct Privacy {
  enum class Mode { kNone, kCentral, kLocal, kDistributed };
  Mode mode = Mode::kNone;
  double clip = 0, noise = 0, delta = 0;
  double quantile = 0, clip_lr = 0.2, count_noise = 0;  // adaptive clipping when Q > 0
  bool on() const { return mode != Mode::kNone; }
  bool adaptive() const { return on() && quantile > 0; }
  // Whether the round's sum carries the whole noise (central, distributed): the accountant
  // counts one sampled Gaussian mechanism per round.
  bool per_round() const { return mode == Mode::kCentral || mode == Mode::kDistributed; }
  const char* name() const;
  std::string ToString() const;
};

// The --dp kinds (names and parameters, for errors and the docs).
const SpecRegistry& PrivacyModes();
StatusOr<Privacy> ParsePrivacy(const std::string& spec);

// Scales the update (every tensor together) down to L2 norm at most `clip`; returns its norm
// before.
double ClipUpdate(std::vector<std::vector<float>>& update, double clip);
// Adds Gaussian noise of standard deviation `std` to every value.
void AddGaussianNoise(std::vector<std::vector<float>>& update, double std, std::mt19937_64& rng);

}  // namespace hetps
