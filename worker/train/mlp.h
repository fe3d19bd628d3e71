// Mlp: a fully connected network with ReLU hidden layers and a softmax cross-entropy loss, on
// Eigen (the CPU reference for any GPU path). Each layer's weight and bias are their own
// tensors ("fc<l>.w" of shape {out, in}, "fc<l>.b" of shape {out}) with layer index l, so
// per-layer features of the parameter server have something to act on.
//
// Parameters live outside the model, one float buffer per tensor in Tensors() order, so they
// can be pulled into and pushed from directly. Thread-safety: const methods keep no state.
#pragma once

#include <cstdint>
#include <vector>

#include "common/shard_map.h"

namespace hetps {

using Params = std::vector<std::vector<float>>;

class Mlp {
 public:
  // sizes = {inputs, hidden..., classes}, e.g. {784, 256, 128, 10}.
  explicit Mlp(std::vector<int> sizes);

  const std::vector<int>& sizes() const { return sizes_; }
  std::vector<TensorSpec> Tensors() const;
  // He-initialized weights, zero biases (seeded).
  Params Init(uint64_t seed) const;
  Params Zeros() const;

  // Mean cross-entropy of the batch; fills `grads` (same layout as params) with its gradient.
  // x: batch x inputs row-major; y: batch labels.
  double LossAndGradients(const Params& params, const float* x, const int32_t* y, int64_t batch,
                          Params& grads) const;
  // Predicted class of each of n samples.
  void Predict(const Params& params, const float* x, int64_t n, int32_t* out) const;
  // Fraction of n samples classified correctly.
  double Accuracy(const Params& params, const float* x, const int32_t* y, int64_t n) const;

 private:
  std::vector<int> sizes_;
};

}  // namespace hetps
