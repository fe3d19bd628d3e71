// The built-in training workload: a model (mlp or cnn) on an IDX data set (Fashion-MNIST by
// default) trained through the parameter server. Each iteration pulls every layer, computes the
// gradient of one minibatch from this worker's partition, pushes it and ends the clock; the push
// stays in flight while the next pull is issued (the connection is FIFO, so the server applies it
// first). Rank 0 also evaluates on the test set every eval_every clocks, without stopping the
// others (or, with a validation split, on samples held out of the training set).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "common/status.h"
#include "hetps/client.h"
#include "hetps/link.h"
#include "worker/ctr/ctr_training.h"
#include "worker/train/workload.h"

namespace hetps {

// What a step-by-step worker trains and how (its data and model: WorkloadOptions).
struct TrainOptions : WorkloadOptions {
  int batch = 64;
  int iterations = 1000;  // clocks
  int eval_every = 200;
  // Samples held out of the training set (a seeded draw, apart from the split): when > 0 the
  // workers train on the rest and rank 0 evaluates on these instead of the test set, so that
  // tuning (hetps experiment's learning-rate sweep) never sees the test set.
  int64_t validation = 0;
  // Deferred evaluation: rank 0 keeps a copy of the model it pulled at each evaluation clock
  // and evaluates the copies after its last iteration, each row stamped with the time it was
  // taken; training never waits for an evaluation, so time to an accuracy is not inflated by
  // measuring it (hetps experiment uses it). Copies beyond kDeferredEvalBytes are evaluated on
  // the spot. Live (false): evaluated at once, the accuracy printed as training goes.
  bool eval_deferred = false;
  int progress_every = 100;
  // A straggler process (worker/train/straggler.h), seeded by (seed, rank); its factor
  // multiplies `slowdown` per iteration.
  std::string straggler = "none";
  int log_every = 10;  // clocks between rows of the run's metrics
  // Virtual time (worker/train/virtual_steps.h; the scheduler runs --clock=virtual): each step
  // is two turns in virtual-time order; its compute takes the device model's virtual time
  // (device_gflops: the device's sustained training GFLOP/s, times slowdown and the straggler
  // factor), its transfers the emulated link's. The run's metrics are stamped in virtual time.
  bool virtual_clock = false;
  double device_gflops = 1;
  LinkOptions link;
  CtrOptions ctr;  // model "ctr" (worker/ctr/ctr_training.h)
};

// Trains until the worker's clock reaches `iterations`; rank 0 prints the final test accuracy.
// Returns an error if the data cannot be loaded or a request fails.
Status RunTraining(Client& client, const TrainOptions& options, const std::atomic<bool>& stop);
// What RunTraining refuses before it starts, checked without a cluster (hetps-worker
// --check_flags, so `hetps launch` can refuse bad flags before starting anything).
Status ValidateTrainOptions(const TrainOptions& options);

// The most memory deferred evaluation keeps in model copies (TrainOptions::eval_deferred).
inline constexpr int64_t kDeferredEvalBytes = int64_t{1} << 30;

}  // namespace hetps
