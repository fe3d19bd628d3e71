#include "worker/ctr/ctr_model.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <random>

namespace hetps {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapM = Eigen::Map<Matrix>;
using ConstMapM = Eigen::Map<const Matrix>;
using MapV = Eigen::Map<Eigen::VectorXf>;
using ConstMapV = Eigen::Map<const Eigen::VectorXf>;

}  // namespace

CtrModel::CtrModel(int fields, int dim, int dense, int hidden)
    : fields_(fields), dim_(dim), dense_(dense), hidden_(hidden), inputs_(fields * dim + dense) {
  tensors_ = {{"ctr.fc0.w", {hidden_, inputs_}, 1},
              {"ctr.fc0.b", {hidden_}, 1},
              {"ctr.fc1.w", {1, hidden_}, 2},
              {"ctr.fc1.b", {1}, 2}};
}

CtrParams CtrModel::Init(uint64_t seed) const {
  std::mt19937_64 rng(seed);
  CtrParams p;
  for (const TensorSpec& t : tensors_) p.emplace_back(t.NumElements(), 0.0f);
  std::normal_distribution<float> w0(0, std::sqrt(2.0f / inputs_)),
      w1(0, std::sqrt(2.0f / hidden_));
  for (float& v : p[0]) v = w0(rng);
  for (float& v : p[2]) v = w1(rng);
  return p;
}

void CtrModel::Forward(const CtrParams& params, const float* rows, const float* dense, int n) {
  const int emb = fields_ * dim_;
  x_.resize(static_cast<size_t>(n) * inputs_);
  for (int i = 0; i < n; ++i) {
    std::copy_n(rows + static_cast<size_t>(i) * emb, emb, &x_[static_cast<size_t>(i) * inputs_]);
    std::copy_n(dense + static_cast<size_t>(i) * dense_, dense_,
                &x_[static_cast<size_t>(i) * inputs_ + emb]);
  }
  h_.resize(static_cast<size_t>(n) * hidden_);
  z_.resize(n);
  ConstMapM x(x_.data(), n, inputs_), w0(params[0].data(), hidden_, inputs_);
  MapM h(h_.data(), n, hidden_);
  h.noalias() = x * w0.transpose();
  h.rowwise() += ConstMapV(params[1].data(), hidden_).transpose();
  h = h.cwiseMax(0.0f);
  MapV z(z_.data(), n);
  z.noalias() = h * ConstMapV(params[2].data(), hidden_);
  z.array() += params[3][0];
}

double CtrModel::Step(const CtrParams& params, const float* rows, const float* dense,
                      const float* labels, int n, CtrParams& grads, std::vector<float>& row_grads) {
  Forward(params, rows, dense, n);
  // d loss / d logit = (sigmoid(z) - y) / n, the loss log(1 + e^z) - y z (stable for any z).
  std::vector<float> dz(n);
  double loss = 0;
  for (int i = 0; i < n; ++i) {
    const double z = z_[i];
    loss += std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z))) - labels[i] * z;
    dz[i] = static_cast<float>((1 / (1 + std::exp(-z)) - labels[i]) / n);
  }
  grads.resize(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) grads[t].assign(tensors_[t].NumElements(), 0.0f);
  ConstMapM x(x_.data(), n, inputs_), w0(params[0].data(), hidden_, inputs_);
  ConstMapM h(h_.data(), n, hidden_);
  ConstMapV d(dz.data(), n), w1(params[2].data(), hidden_);
  MapV(grads[2].data(), hidden_).noalias() = h.transpose() * d;
  grads[3][0] = d.sum();
  Matrix dh = (d * w1.transpose()).cwiseProduct((h.array() > 0.0f).cast<float>().matrix());
  MapM(grads[0].data(), hidden_, inputs_).noalias() = dh.transpose() * x;
  MapV(grads[1].data(), hidden_) = dh.colwise().sum().transpose();
  const Matrix dx = dh * w0;
  const int emb = fields_ * dim_;
  row_grads.resize(static_cast<size_t>(n) * emb);
  MapM(row_grads.data(), n, emb) = dx.leftCols(emb);
  return loss / n;
}

void CtrModel::Predict(const CtrParams& params, const float* rows, const float* dense, int n,
                       std::vector<double>& p) {
  Forward(params, rows, dense, n);
  p.resize(n);
  for (int i = 0; i < n; ++i) p[i] = 1 / (1 + std::exp(-static_cast<double>(z_[i])));
}

}  // namespace hetps
