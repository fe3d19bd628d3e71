// IDX files (the MNIST format) and labelled image data sets built from them. Files may be
// gzip-compressed (as Debian's dataset-fashion-mnist ships them) or plain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct IdxArray {
  std::vector<int32_t> dims;
  std::vector<uint8_t> data;  // unsigned bytes, row-major
};

// Reads one IDX file of unsigned bytes. Fails with a clear message on a missing file, a bad
// magic number, an unsupported element type, or fewer bytes than the header promises.
StatusOr<IdxArray> ReadIdx(const std::string& path);

// Images as floats standardized to mean 0 and standard deviation 1 (over the whole set), and
// their labels.
struct Dataset {
  int64_t size = 0;
  int64_t features = 0;  // rows x cols
  int32_t rows = 0, cols = 0;
  int32_t classes = 10;
  std::vector<float> x;    // size x features, row-major
  std::vector<int32_t> y;  // size labels in [0, classes)
};

// Mean and standard deviation over every pixel of a set; a sample's features are its pixels
// standardized with them.
struct PixelStats {
  double mean = 0, std = 1;
};
PixelStats ComputePixelStats(const uint8_t* pixels, size_t n);
inline float Standardize(uint8_t v, const PixelStats& s) {
  return static_cast<float>((v - s.mean) / s.std);
}

// Checks that `images` (3 dims: n, rows, cols) and `labels` (1 dim: n, each below `classes`)
// form a labelled set; the error names the file at fault.
Status CheckIdxPair(const IdxArray& images, const IdxArray& labels, const std::string& images_path,
                    const std::string& labels_path, int32_t classes);

// Loads an image file (3 dims: n, rows, cols) and its label file (1 dim: n).
StatusOr<Dataset> LoadIdxPair(const std::string& images, const std::string& labels,
                              int32_t classes = 10);

// Where dataset-fashion-mnist puts its files, and the paths of `split` ("train" or "t10k").
constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
std::string FashionMnistImages(const std::string& dir, const std::string& split);
// `given` when set (a path from the command line), else `fallback` (the data set's default).
inline std::string PathOr(const std::string& given, const std::string& fallback) {
  return given.empty() ? fallback : given;
}
std::string FashionMnistLabels(const std::string& dir, const std::string& split);

}  // namespace hetps
