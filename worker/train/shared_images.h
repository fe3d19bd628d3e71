// SharedImages: a labelled image set (an IDX pair) decoded once per machine into a plain cache
// file that every process maps read-only. A hundred edge clients on one machine then share one
// copy of the pixels (the page cache's) and each holds only its own shard as floats, where
// LoadIdxPair would give every process the whole set as floats (about 190 MB for
// Fashion-MNIST's training set).
//
// The cache file is <cache_dir>/<key>.images, the key hashing the sources' paths, sizes and
// modification times, so a changed source gets a new file. It is written under a temporary name
// and renamed: concurrent processes never map a partial file (each may write its own; the last
// rename wins and all are equal). A cache file that is damaged (short, wrong magic or counts)
// is rebuilt from the sources.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/train/idx.h"

namespace hetps {

class SharedImages {
 public:
  // Maps the cache of (images, labels) in `cache_dir` (created if missing), building it from
  // the sources first when it is absent or damaged. Fails with the reason when a source is
  // missing or malformed, or the cache cannot be written or mapped.
  static StatusOr<SharedImages> Open(const std::string& images, const std::string& labels,
                                     const std::string& cache_dir, int32_t classes = 10);
  SharedImages(SharedImages&& other) noexcept;
  SharedImages& operator=(SharedImages&&) = delete;
  SharedImages(const SharedImages&) = delete;
  ~SharedImages();

  int64_t size() const { return size_; }
  int32_t rows() const { return rows_; }
  int32_t cols() const { return cols_; }
  int64_t features() const { return static_cast<int64_t>(rows_) * cols_; }
  int32_t classes() const { return classes_; }
  const std::vector<int32_t>& labels() const { return labels_; }
  const std::string& path() const { return path_; }

  // The samples `indices` (each in [0, size())) as a Dataset, in that order, with floats
  // standardized exactly as LoadIdxPair standardizes the whole set (same mean and std).
  Dataset Gather(const std::vector<int64_t>& indices) const;

  // The default cache folder: $TMPDIR (or /tmp) / hetps-data-<uid>.
  static std::string DefaultCacheDir();

 private:
  SharedImages() = default;

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* pixels_ = nullptr;
  int64_t size_ = 0;
  int32_t rows_ = 0, cols_ = 0, classes_ = 10;
  double mean_ = 0, std_ = 1;
  std::vector<int32_t> labels_;
};

}  // namespace hetps
