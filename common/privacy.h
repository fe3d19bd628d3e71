// Client-level differential privacy for federated rounds (--dp, ALGORITHMS.md §12; DP-FedAvg,
// McMahan et al., ICLR'18): every client clips its update (all tensors together) to L2 norm
// `clip` and uploads it unweighted, so that adding or removing one client moves a round's sum by
// at most `clip`; Gaussian noise of standard deviation noise x clip then hides it:
//   none                              no clipping, no noise
//   central:clip=C,noise=Z[,delta=D]  the servers add the noise to each round's sum
//                                     (--aggregator=dp_fedavg, which hetps fed sets)
//   local:clip=C,noise=Z[,delta=D]    each client adds it to its own update before uploading
// The scheduler's accountant (common/rdp_accountant.h) reports the (epsilon, delta) spent.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "common/registry.h"

namespace hetps {

struct Privacy {
  enum class Mode { kNone, kCentral, kLocal };
  Mode mode = Mode::kNone;
  double clip = 0, noise = 0, delta = 0;
  bool on() const { return mode != Mode::kNone; }
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
