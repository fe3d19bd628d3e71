// What a worker trains, whether it trains in rounds as an edge client (worker/edge/) or step by
// step (worker/train/trainer.h): the data set, how it is split among the workers, and the model.
// TrainOptions and EdgeOptions extend WorkloadOptions; the functions below are the set-up both
// do the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/train/idx.h"
#include "worker/train/model.h"
#include "worker/train/shared_images.h"

namespace hetps {

struct WorkloadOptions {
  std::string dataset_dir = kFashionMnistDir;
  std::string train_images, train_labels, test_images, test_labels;  // override dataset_dir
  std::string data_cache;                // SharedImages' folder; empty: its default
  std::string partition = "iid";         // iid | dirichlet | shards (edge clients only)
  double dirichlet_alpha = 0.5;          // dirichlet
  int shards_per_client = 2;             // shards
  std::string model = "mlp";             // mlp | cnn
  std::vector<int> hidden = {256, 128};  // mlp
  std::string device = "auto";           // auto | cpu | cuda
  // The worker's index among the workers on its host: with cuda, its GPU is local_rank mod the
  // visible devices (CUDA_VISIBLE_DEVICES respected). -1: the worker's rank.
  int local_rank = -1;
  int compute_threads = 1;
  uint64_t seed = 1;      // the split, the initial model, each worker's sample order
  double slowdown = 1.0;  // multiplies compute time (a slower device, a straggler)
  std::string run_dir;    // when set: metrics, summary.json, plot.png (edge: model.bin) go there
};

// The training set, from the machine's shared cache of its pixels.
StatusOr<SharedImages> OpenTrainSet(const WorkloadOptions& o);
// The whole test set.
StatusOr<Dataset> LoadTestSet(const WorkloadOptions& o);
// Positions 0..labels.size()-1 split into `parts` by o.partition (seeded by o.seed); `labels`
// are those of the positions (dirichlet and shards split by label).
std::vector<std::vector<int64_t>> SplitSamples(const WorkloadOptions& o,
                                               const std::vector<int32_t>& labels, int classes,
                                               int parts);
// The model o.model of inputs `rows` x `cols` and `classes` outputs, on o.device, with
// o.compute_threads threads for its CPU work.
// `rank`: the worker's, for o.local_rank = -1.
StatusOr<std::unique_ptr<Model>> MakeWorkloadModel(const WorkloadOptions& o, int rank, int rows,
                                                   int cols, int classes);

}  // namespace hetps
