// topk (density): the k = ceil(density * n) largest magnitudes, sent as k ascending uint32
// indices then k float values (8k bytes).
#include "common/compress/topk.h"

#include <algorithm>
#include <cmath>

#include "common/compress/codecs.h"
#include "common/compress/sparse.h"

namespace hetps::compress {
namespace {

inline float Magnitude(float v) { return v == v ? std::fabs(v) : 0.0f; }

class TopK : public Codec {
 public:
  explicit TopK(const CodecSpec& spec) : Codec(spec), density_(Param("density")) {}
  int64_t EncodedBytes(int64_t n, const CodecContext&) const override {
    return 8 * KeepCount(n, density_);
  }
  void Encode(const float* x, int64_t n, const CodecContext&, CodecState*,
              std::vector<uint8_t>& out) const override {
    const int64_t k = KeepCount(n, density_);
    std::vector<uint32_t> indices;
    SelectTopK(x, n, k, indices);
    out.resize(8 * k);
    auto* idx = reinterpret_cast<uint32_t*>(out.data());
    auto* val = reinterpret_cast<float*>(out.data() + 4 * k);
    for (int64_t j = 0; j < k; ++j) {
      idx[j] = indices[j];
      val[j] = x[indices[j]];
    }
  }
  Status Decode(const uint8_t* data, size_t size, int64_t n, const CodecContext&,
                float* out) const override {
    const int64_t k = KeepCount(n, density_);
    if (size != static_cast<size_t>(8 * k)) return SizeError(size, 8 * k, n);
    return DecodeSparse(data, k, n, out, "topk");
  }

 private:
  double density_;
};

}  // namespace

void SelectTopK(const float* x, int64_t n, int64_t k, std::vector<uint32_t>& indices) {
  indices.clear();
  if (k >= n) {
    for (int64_t i = 0; i < n; ++i) indices.push_back(static_cast<uint32_t>(i));
    return;
  }
  // Threshold: the magnitude ranking about 1.5k / n of a strided sample.
  const int64_t m = std::min<int64_t>(n, std::max<int64_t>(4096, n / 100));
  const int64_t stride = n / m;
  std::vector<float> sample(m);
  for (int64_t j = 0; j < m; ++j) sample[j] = Magnitude(x[j * stride]);
  int64_t rank = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(1.5 * static_cast<double>(k) / n * m)), 1, m);
  std::vector<uint32_t> candidates;
  std::vector<float> mags;
  candidates.reserve(2 * k + 16);
  while (true) {
    float threshold = 0;
    if (rank < m) {
      std::nth_element(sample.begin(), sample.begin() + (rank - 1), sample.end(),
                       std::greater<float>());
      threshold = sample[rank - 1];
    }
    candidates.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (Magnitude(x[i]) >= threshold) candidates.push_back(static_cast<uint32_t>(i));
    }
    if (static_cast<int64_t>(candidates.size()) >= k || rank >= m) break;
    rank = std::min(m, rank * 2);  // too few above it: lower the threshold
  }
  // Every element outside the candidates is below every candidate, so the top k are among them.
  mags.resize(candidates.size());
  for (size_t j = 0; j < candidates.size(); ++j) mags[j] = Magnitude(x[candidates[j]]);
  std::vector<float> order = mags;
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), std::greater<float>());
  const float kth = order[k - 1];
  int64_t above = 0;
  for (float v : mags) above += v > kth;
  int64_t ties = k - above;  // equal to the k-th: the lowest indices win
  indices.reserve(k);
  for (size_t j = 0; j < candidates.size(); ++j) {
    if (mags[j] > kth || (mags[j] == kth && ties-- > 0)) indices.push_back(candidates[j]);
  }
}

void RegisterTopK(CodecRegistry& r) {
  r.Add({"topk",
         "the k = ceil(density n) largest magnitudes as (index, value) pairs",
         {Density("0.01"), EfParam(false)}},
        {[](const CodecSpec& spec) { return std::make_unique<TopK>(spec); }});
}

}  // namespace hetps::compress
