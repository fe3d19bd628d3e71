#include "worker/train/shared_images.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

namespace hetps {
namespace {

constexpr char kMagic[8] = {'H', 'E', 'T', 'P', 'S', 'I', 'M', '1'};

// The cache file's header; labels (one byte each) and pixels follow.
struct CacheHeader {
  char magic[8];
  int64_t size;
  int32_t rows, cols, classes, reserved;
  double mean, std;
};

StatusOr<std::string> SourceKey(const std::string& images, const std::string& labels) {
  std::string key;
  for (const std::string& p : {images, labels}) {
    std::error_code ec;
    const std::string absolute = std::filesystem::absolute(p, ec).string();
    struct stat st {};
    if (ec || stat(p.c_str(), &st) != 0) return Status::NotFound(fmt::format("no file {}", p));
    key += fmt::format("{}:{}:{}.{};", absolute, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  }
  return fmt::format("{:016x}", XXH3_64bits(key.data(), key.size()));
}

// Decodes the sources and writes the cache file under a temporary name, then renames it.
Status BuildCache(const std::string& images, const std::string& labels, int32_t classes,
                  const std::string& path) {
  auto x = ReadIdx(images);
  if (!x.ok()) return x.status();
  auto y = ReadIdx(labels);
  if (!y.ok()) return y.status();
  if (Status s = CheckIdxPair(*x, *y, images, labels, classes); !s.ok()) return s;
  const PixelStats stats = ComputePixelStats(x->data.data(), x->data.size());
  CacheHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.size = x->dims[0];
  h.rows = x->dims[1];
  h.cols = x->dims[2];
  h.classes = classes;
  h.mean = stats.mean;
  h.std = stats.std;
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&h), sizeof(h));
    out.write(reinterpret_cast<const char*>(y->data.data()), h.size);
    out.write(reinterpret_cast<const char*>(x->data.data()),
              static_cast<std::streamsize>(x->data.size()));
    if (!out.flush()) {
      std::filesystem::remove(tmp);
      return Status::Internal(fmt::format("cannot write the data cache {}", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::filesystem::remove(tmp);
    return Status::Internal(fmt::format("cannot rename {} to {}: {}", tmp, path, strerror(errno)));
  }
  return Status();
}

}  // namespace

std::string SharedImages::DefaultCacheDir() {
  const char* tmp = std::getenv("TMPDIR");
  return fmt::format("{}/hetps-data-{}", tmp && *tmp ? tmp : "/tmp", getuid());
}

StatusOr<SharedImages> SharedImages::Open(const std::string& images, const std::string& labels,
                                          const std::string& cache_dir, int32_t classes) {
  auto key = SourceKey(images, labels);
  if (!key.ok()) return key.status();
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) {
    return Status::Internal(
        fmt::format("cannot create the data cache folder {}: {}", cache_dir, ec.message()));
  }
  SharedImages s;
  s.path_ = fmt::format("{}/{}.images", cache_dir, *key);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1 || !std::filesystem::exists(s.path_)) {
      if (Status b = BuildCache(images, labels, classes, s.path_); !b.ok()) return b;
    }
    const int fd = open(s.path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    fstat(fd, &st);
    const size_t bytes = static_cast<size_t>(st.st_size);
    void* map = bytes >= sizeof(CacheHeader) ? mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0)
                                             : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) continue;
    CacheHeader h;
    std::memcpy(&h, map, sizeof(h));
    const bool valid = std::memcmp(h.magic, kMagic, sizeof(kMagic)) == 0 && h.size > 0 &&
                       h.rows > 0 && h.cols > 0 && h.classes == classes &&
                       bytes == sizeof(h) + static_cast<size_t>(h.size) *
                                                (1 + static_cast<size_t>(h.rows) * h.cols);
    if (!valid) {  // damaged: built again from the sources
      munmap(map, bytes);
      continue;
    }
    s.map_ = static_cast<const uint8_t*>(map);
    s.map_bytes_ = bytes;
    s.size_ = h.size;
    s.rows_ = h.rows;
    s.cols_ = h.cols;
    s.classes_ = h.classes;
    s.mean_ = h.mean;
    s.std_ = h.std;
    const uint8_t* labels_at = s.map_ + sizeof(h);
    s.labels_.assign(labels_at, labels_at + h.size);
    s.pixels_ = labels_at + h.size;
    return s;
  }
  return Status::Internal(fmt::format("cannot map the data cache {}", s.path_));
}

SharedImages::SharedImages(SharedImages&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      pixels_(o.pixels_),
      size_(o.size_),
      rows_(o.rows_),
      cols_(o.cols_),
      classes_(o.classes_),
      mean_(o.mean_),
      std_(o.std_),
      labels_(std::move(o.labels_)) {}

SharedImages::~SharedImages() {
  if (map_ != nullptr) munmap(const_cast<uint8_t*>(map_), map_bytes_);
}

Dataset SharedImages::Gather(const std::vector<int64_t>& indices) const {
  Dataset d;
  d.size = static_cast<int64_t>(indices.size());
  d.rows = rows_;
  d.cols = cols_;
  d.features = features();
  d.classes = classes_;
  d.x.resize(static_cast<size_t>(d.size) * d.features);
  d.y.resize(d.size);
  const PixelStats stats{mean_, std_};
  for (int64_t i = 0; i < d.size; ++i) {
    const uint8_t* row = pixels_ + indices[i] * d.features;
    float* out = d.x.data() + i * d.features;
    for (int64_t f = 0; f < d.features; ++f) out[f] = Standardize(row[f], stats);
    d.y[i] = labels_[indices[i]];
  }
  return d;
}

}  // namespace hetps
