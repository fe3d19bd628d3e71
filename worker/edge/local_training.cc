#include "worker/edge/local_training.h"

#include <algorithm>
#include <numeric>

namespace hetps {

StatusOr<double> TrainLocally(Model& model, const Dataset& shard, const LocalTraining& o,
                              const Params& start, Params& params, Params& grads,
                              std::mt19937_64& rng) {
  std::vector<int64_t> order(shard.size);
  std::iota(order.begin(), order.end(), 0);
  std::vector<float> x;
  std::vector<int32_t> y;
  double last_epoch_loss = 0;
  const float lr = static_cast<float>(o.lr), mu = static_cast<float>(o.prox_mu);
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double loss_sum = 0;
    for (int64_t begin = 0; begin < shard.size; begin += o.batch) {
      const int64_t n = std::min<int64_t>(o.batch, shard.size - begin);
      x.resize(static_cast<size_t>(n) * shard.features);
      y.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t s = order[begin + i];
        std::copy_n(shard.x.begin() + s * shard.features, shard.features,
                    x.begin() + i * shard.features);
        y[i] = shard.y[s];
      }
      auto loss = model.LossAndGradients(params, x.data(), y.data(), n, grads);
      if (!loss.ok()) return loss.status();
      loss_sum += *loss * static_cast<double>(n);
      for (size_t t = 0; t < params.size(); ++t) {
        float* w = params[t].data();
        const float* g = grads[t].data();
        const float* w0 = start[t].data();
        const size_t len = params[t].size();
        if (mu > 0) {
          for (size_t i = 0; i < len; ++i) w[i] -= lr * (g[i] + mu * (w[i] - w0[i]));
        } else {
          for (size_t i = 0; i < len; ++i) w[i] -= lr * g[i];
        }
      }
    }
    last_epoch_loss = shard.size > 0 ? loss_sum / static_cast<double>(shard.size) : 0;
  }
  return last_epoch_loss;
}

}  // namespace hetps
