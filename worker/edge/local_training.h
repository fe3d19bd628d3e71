// Local training of a federated client: E epochs of minibatch SGD over the client's own shard,
// starting from the global model it pulled (FedAvg's ClientUpdate, McMahan et al. 2017), with
// FedProx's proximal term as an option (Li et al., MLSys'20): each step's gradient gains
// mu * (w - w_start), which keeps the local model near the global one on skewed data.
#pragma once

#include <random>

#include "common/status.h"
#include "worker/train/idx.h"
#include "worker/train/model.h"

namespace hetps {

struct LocalTraining {
  int epochs = 1;
  int batch = 32;
  double lr = 0.05;
  double prox_mu = 0;  // 0: plain local SGD
};

// Trains `params` (in the layout of model.Tensors(), equal to `start` on entry) in place; the
// shard's samples are visited in a fresh order drawn from `rng` each epoch, the last batch of
// an epoch possibly smaller. `grads` is scratch of the same layout. Returns the mean loss over
// the last epoch's samples (0 for an empty shard, which leaves params unchanged).
// REQUIRES: options.epochs >= 1, options.batch >= 1.
StatusOr<double> TrainLocally(Model& model, const Dataset& shard, const LocalTraining& options,
                              const Params& start, Params& params, Params& grads,
                              std::mt19937_64& rng);

}  // namespace hetps
