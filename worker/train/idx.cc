#include "worker/train/idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace hetps {
namespace {

// The whole file, decompressed when it is gzip (zlib reads plain files unchanged).
StatusOr<std::vector<uint8_t>> ReadAll(const std::string& path) {
  if (!std::filesystem::exists(path)) return Status::NotFound(fmt::format("no file {}", path));
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return Status::NotFound(fmt::format("cannot open {}", path));
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    return Status::Malformed(fmt::format("{}: {}", path, msg));
  }
  return out;
}

uint32_t BigEndian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

StatusOr<IdxArray> ReadIdx(const std::string& path) {
  auto bytes = ReadAll(path);
  if (!bytes.ok()) return bytes.status();
  const std::vector<uint8_t>& b = *bytes;
  if (b.size() < 4 || b[0] != 0 || b[1] != 0) {
    return Status::Malformed(fmt::format("{} is not an IDX file (bad magic number)", path));
  }
  if (b[2] != 0x08) {
    return Status::Malformed(
        fmt::format("{}: element type 0x{:02x} is not unsigned byte (0x08)", path, b[2]));
  }
  const int ndims = b[3];
  if (ndims < 1 || b.size() < 4 + 4 * static_cast<size_t>(ndims)) {
    return Status::Malformed(fmt::format("{}: truncated header ({} dims)", path, ndims));
  }
  IdxArray a;
  uint64_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    a.dims.push_back(static_cast<int32_t>(BigEndian(&b[4 + 4 * d])));
    count *= static_cast<uint64_t>(a.dims.back());
  }
  const size_t offset = 4 + 4 * static_cast<size_t>(ndims);
  if (b.size() - offset < count) {
    return Status::Malformed(fmt::format("{} is truncated: header promises {} bytes, {} present",
                                         path, count, b.size() - offset));
  }
  a.data.assign(b.begin() + static_cast<std::ptrdiff_t>(offset),
                b.begin() + static_cast<std::ptrdiff_t>(offset + count));
  return a;
}

PixelStats ComputePixelStats(const uint8_t* pixels, size_t n) {
  double sum = 0, sq = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += pixels[i];
    sq += static_cast<double>(pixels[i]) * pixels[i];
  }
  const double count = static_cast<double>(std::max<size_t>(n, 1));
  const double mean = sum / count;
  return {mean, std::sqrt(std::max(sq / count - mean * mean, 1e-12))};
}

Status CheckIdxPair(const IdxArray& x, const IdxArray& y, const std::string& images,
                    const std::string& labels, int32_t classes) {
  if (x.dims.size() != 3) {
    return Status::Malformed(
        fmt::format("{}: images need 3 dims, found {}", images, x.dims.size()));
  }
  if (y.dims.size() != 1 || y.dims[0] != x.dims[0]) {
    return Status::Malformed(fmt::format("{} holds {} labels for {} images", labels,
                                         y.dims.empty() ? 0 : y.dims[0], x.dims[0]));
  }
  for (size_t i = 0; i < y.data.size(); ++i) {
    if (y.data[i] >= classes) {
      return Status::Malformed(
          fmt::format("{}: label {} at {} is not below {} classes", labels, y.data[i], i, classes));
    }
  }
  return Status();
}

StatusOr<Dataset> LoadIdxPair(const std::string& images, const std::string& labels,
                              int32_t classes) {
  auto x = ReadIdx(images);
  if (!x.ok()) return x.status();
  auto y = ReadIdx(labels);
  if (!y.ok()) return y.status();
  if (Status s = CheckIdxPair(*x, *y, images, labels, classes); !s.ok()) return s;
  Dataset d;
  d.size = x->dims[0];
  d.rows = x->dims[1];
  d.cols = x->dims[2];
  d.features = static_cast<int64_t>(x->dims[1]) * x->dims[2];
  d.classes = classes;
  const PixelStats stats = ComputePixelStats(x->data.data(), x->data.size());
  d.x.resize(x->data.size());
  for (size_t i = 0; i < x->data.size(); ++i) d.x[i] = Standardize(x->data[i], stats);
  d.y.assign(y->data.begin(), y->data.end());
  return d;
}

std::string FashionMnistImages(const std::string& dir, const std::string& split) {
  return fmt::format("{}/{}-images-idx3-ubyte.gz", dir, split);
}

std::string FashionMnistLabels(const std::string& dir, const std::string& split) {
  return fmt::format("{}/{}-labels-idx1-ubyte.gz", dir, split);
}

}  // namespace hetps
