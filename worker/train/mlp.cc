#include "worker/train/mlp.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <cmath>
#include <random>

namespace hetps {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<Matrix>;
using ConstMatrixMap = Eigen::Map<const Matrix>;
using ConstVectorMap = Eigen::Map<const Eigen::RowVectorXf>;

}  // namespace

Mlp::Mlp(std::vector<int> sizes) : sizes_(std::move(sizes)) {}

std::vector<TensorSpec> Mlp::Tensors() const {
  std::vector<TensorSpec> t;
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    const auto layer = static_cast<int32_t>(l);
    t.push_back({fmt::format("fc{}.w", l), {sizes_[l + 1], sizes_[l]}, layer});
    t.push_back({fmt::format("fc{}.b", l), {sizes_[l + 1]}, layer});
  }
  return t;
}

Params Mlp::Zeros() const {
  Params p;
  for (const TensorSpec& t : Tensors()) p.emplace_back(t.NumElements(), 0.0f);
  return p;
}

Params Mlp::Init(uint64_t seed) const {
  Params p = Zeros();
  std::mt19937_64 rng(seed);
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    std::normal_distribution<float> he(0.0f, std::sqrt(2.0f / static_cast<float>(sizes_[l])));
    for (float& w : p[2 * l]) w = he(rng);
  }
  return p;
}

double Mlp::LossAndGradients(const Params& params, const float* x, const int32_t* y, int64_t batch,
                             Params& grads) const {
  const size_t layers = sizes_.size() - 1;
  // Forward: keep every layer's input activation.
  std::vector<Matrix> a(layers + 1);
  a[0] = ConstMatrixMap(x, batch, sizes_[0]);
  for (size_t l = 0; l < layers; ++l) {
    ConstMatrixMap w(params[2 * l].data(), sizes_[l + 1], sizes_[l]);
    ConstVectorMap b(params[2 * l + 1].data(), sizes_[l + 1]);
    Matrix z = a[l] * w.transpose();
    z.rowwise() += b;
    a[l + 1] = l + 1 < layers ? Matrix(z.cwiseMax(0.0f)) : z;
  }
  // Softmax cross-entropy; delta = (softmax - onehot) / batch.
  Matrix delta = a[layers];
  double loss = 0;
  for (int64_t i = 0; i < batch; ++i) {
    auto row = delta.row(i);
    const float max = row.maxCoeff();
    row = (row.array() - max).exp();
    const float sum = row.sum();
    row /= sum;
    loss -= std::log(std::max(row(y[i]), 1e-30f));
    row(y[i]) -= 1.0f;
  }
  delta /= static_cast<float>(batch);
  // Backward.
  for (size_t l = layers; l-- > 0;) {
    MatrixMap gw(grads[2 * l].data(), sizes_[l + 1], sizes_[l]);
    Eigen::Map<Eigen::RowVectorXf> gb(grads[2 * l + 1].data(), sizes_[l + 1]);
    gw.noalias() = delta.transpose() * a[l];
    gb = delta.colwise().sum();
    if (l == 0) break;
    ConstMatrixMap w(params[2 * l].data(), sizes_[l + 1], sizes_[l]);
    Matrix back = delta * w;
    delta = back.cwiseProduct(Matrix((a[l].array() > 0.0f).cast<float>()));
  }
  return loss / static_cast<double>(batch);
}

void Mlp::Predict(const Params& params, const float* x, int64_t n, int32_t* out) const {
  const size_t layers = sizes_.size() - 1;
  constexpr int64_t kChunk = 1024;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t rows = std::min(kChunk, n - begin);
    Matrix a = ConstMatrixMap(x + begin * sizes_[0], rows, sizes_[0]);
    for (size_t l = 0; l < layers; ++l) {
      ConstMatrixMap w(params[2 * l].data(), sizes_[l + 1], sizes_[l]);
      ConstVectorMap b(params[2 * l + 1].data(), sizes_[l + 1]);
      Matrix z = a * w.transpose();
      z.rowwise() += b;
      a = l + 1 < layers ? Matrix(z.cwiseMax(0.0f)) : z;
    }
    for (int64_t i = 0; i < rows; ++i) {
      Eigen::Index arg;
      a.row(i).maxCoeff(&arg);
      out[begin + i] = static_cast<int32_t>(arg);
    }
  }
}

double Mlp::Accuracy(const Params& params, const float* x, const int32_t* y, int64_t n) const {
  std::vector<int32_t> predicted(n);
  Predict(params, x, n, predicted.data());
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) correct += predicted[i] == y[i];
  return n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
}

}  // namespace hetps
