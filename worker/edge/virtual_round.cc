#include "worker/edge/virtual_round.h"

namespace hetps {

double TrainingFlopsPerSample(const Architecture& arch) {
  double forward = 0;
  for (size_t i = 0; i < arch.layers.size(); ++i) {
    const LayerSpec& l = arch.layers[i];
    const Shape& in = arch.shapes[i];
    const Shape& out = arch.shapes[i + 1];
    switch (l.kind) {
      case LayerSpec::Kind::kLinear:
        forward += 2.0 * static_cast<double>(in.size()) * l.out;
        break;
      case LayerSpec::Kind::kConv:
        forward += 2.0 * l.kernel * l.kernel * in.c * static_cast<double>(out.size());
        break;
      case LayerSpec::Kind::kRelu:
      case LayerSpec::Kind::kMaxPool:
        forward += static_cast<double>(in.size());
        break;
    }
  }
  return 3 * forward;
}

double VirtualRound::Download(double t, int64_t bytes) {
  const double asked = shaper_.Up(kRequestBytes, t);
  return shaper_.Down(static_cast<size_t>(bytes), asked);
}

double VirtualRound::Compute(double t, int64_t samples) const {
  return t + static_cast<double>(samples) * flops_per_sample_ / (gflops_ * 1e9) * slowdown_;
}

double VirtualRound::Upload(double t, int64_t bytes) {
  const double arrived = shaper_.Up(static_cast<size_t>(bytes), t);
  return shaper_.Down(kRequestBytes, arrived);
}

}  // namespace hetps
