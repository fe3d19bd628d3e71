// The CTR model, built the way such models are: each sample's 26 embedding rows (one per field,
// from the sparse tables) and its 13 numeric features concatenated, an MLP over them (one
// hidden ReLU layer), one logit, logistic loss. The dense layers are tensors "ctr.fc0.w/b"
// (layer 1) and "ctr.fc1.w/b" (layer 2); the tables' rows come and go with each batch, so the
// model sees them as inputs and hands back their gradients.
#pragma once

#include <cstdint>
#include <vector>

#include "hetps/shard_map.h"

namespace hetps {

using CtrParams = std::vector<std::vector<float>>;

class CtrModel {
 public:
  CtrModel(int fields, int dim, int dense, int hidden);
  const std::vector<TensorSpec>& Tensors() const { return tensors_; }
  int inputs() const { return inputs_; }
  // He-initialized weights, zero biases, seeded.
  CtrParams Init(uint64_t seed) const;
  // One minibatch of n samples: rows (n x fields x dim), dense (n x dense), labels. Returns the
  // mean loss; `grads` gets the dense layers' gradients (Tensors() order) and `row_grads` each
  // sample's embedding rows' (n x fields x dim).
  double Step(const CtrParams& params, const float* rows, const float* dense, const float* labels,
              int n, CtrParams& grads, std::vector<float>& row_grads);
  // Click probabilities of n samples.
  void Predict(const CtrParams& params, const float* rows, const float* dense, int n,
               std::vector<double>& p);

 private:
  // x = [rows | dense] per sample; h = relu(x W0^T + b0); returns the logits.
  void Forward(const CtrParams& params, const float* rows, const float* dense, int n);

  const int fields_, dim_, dense_, hidden_, inputs_;
  std::vector<TensorSpec> tensors_;
  std::vector<float> x_, h_, z_;  // scratch: inputs, hidden activations, logits
};

}  // namespace hetps
