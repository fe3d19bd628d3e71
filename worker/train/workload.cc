#include "worker/train/workload.h"

#include <numeric>

#include "worker/train/partitioner.h"

namespace hetps {
namespace {

std::string CacheDir(const WorkloadOptions& o) {
  return o.data_cache.empty() ? SharedImages::DefaultCacheDir() : o.data_cache;
}

}  // namespace

StatusOr<SharedImages> OpenTrainSet(const WorkloadOptions& o) {
  return SharedImages::Open(PathOr(o.train_images, FashionMnistImages(o.dataset_dir, "train")),
                            PathOr(o.train_labels, FashionMnistLabels(o.dataset_dir, "train")),
                            CacheDir(o));
}

StatusOr<Dataset> LoadTestSet(const WorkloadOptions& o) {
  auto test = SharedImages::Open(PathOr(o.test_images, FashionMnistImages(o.dataset_dir, "t10k")),
                                 PathOr(o.test_labels, FashionMnistLabels(o.dataset_dir, "t10k")),
                                 CacheDir(o));
  if (!test.ok()) return test.status();
  std::vector<int64_t> all(test->size());
  std::iota(all.begin(), all.end(), 0);
  return test->Gather(all);
}

std::vector<std::vector<int64_t>> SplitSamples(const WorkloadOptions& o,
                                               const std::vector<int32_t>& labels, int classes,
                                               int parts) {
  if (o.partition == "dirichlet") {
    return PartitionDirichlet(labels, classes, parts, o.dirichlet_alpha, o.seed);
  }
  if (o.partition == "shards") return PartitionShards(labels, parts, o.shards_per_client, o.seed);
  return PartitionIid(static_cast<int64_t>(labels.size()), parts, o.seed);
}

StatusOr<std::unique_ptr<Model>> MakeWorkloadModel(const WorkloadOptions& o, int rank, int rows,
                                                   int cols, int classes) {
  auto arch = BuildArchitecture(o.model, {1, rows, cols}, classes, o.hidden);
  if (!arch.ok()) return arch.status();
  SetComputeThreads(o.compute_threads);
  return MakeModel(std::move(*arch), o.device, o.local_rank >= 0 ? o.local_rank : rank);
}

}  // namespace hetps
