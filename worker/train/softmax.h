// Softmax cross-entropy on the CPU, shared by the CPU model and the CUDA model's reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace hetps {

// Mean cross-entropy of `batch` rows of logits against labels y; delta gets its gradient with
// respect to the logits, (softmax - onehot) / batch. delta may alias logits.
inline double SoftmaxCrossEntropy(const float* logits, const int32_t* y, int64_t batch, int classes,
                                  float* delta) {
  double loss = 0;
  for (int64_t i = 0; i < batch; ++i) {
    const float* z = logits + i * classes;
    float* d = delta + i * classes;
    const float max = *std::max_element(z, z + classes);
    float sum = 0;
    for (int c = 0; c < classes; ++c) sum += d[c] = std::exp(z[c] - max);
    for (int c = 0; c < classes; ++c) d[c] /= sum;
    loss -= std::log(std::max(d[y[i]], 1e-30f));
    d[y[i]] -= 1.0f;
    for (int c = 0; c < classes; ++c) d[c] /= static_cast<float>(batch);
  }
  return loss / static_cast<double>(batch);
}

}  // namespace hetps
