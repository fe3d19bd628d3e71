#include "worker/train/model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <random>

namespace hetps {

StatusOr<Architecture> Resolve(Shape input, int classes, std::vector<LayerSpec> layers) {
  if (input.size() <= 0 || classes < 2 || layers.empty()) {
    return Status::InvalidArgument("a model needs a non-empty input, >= 2 classes and a layer");
  }
  Architecture a;
  a.input = input;
  a.classes = classes;
  Shape s = input;
  int params = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    a.shapes.push_back(s);
    a.weight_tensor.push_back(-1);
    const auto layer = static_cast<int32_t>(params);
    switch (l.kind) {
      case LayerSpec::Kind::kLinear:
        if (l.out < 1) return Status::InvalidArgument(fmt::format("layer {}: no outputs", i));
        a.weight_tensor.back() = static_cast<int>(a.tensors.size());
        a.tensors.push_back({fmt::format("fc{}.w", params), {l.out, s.size()}, layer});
        a.tensors.push_back({fmt::format("fc{}.b", params), {l.out}, layer});
        ++params;
        s = {l.out, 1, 1};
        break;
      case LayerSpec::Kind::kConv: {
        const int oh = s.h + 2 * l.pad - l.kernel + 1, ow = s.w + 2 * l.pad - l.kernel + 1;
        if (l.out < 1 || l.kernel < 1 || l.pad < 0 || oh < 1 || ow < 1) {
          return Status::InvalidArgument(
              fmt::format("layer {}: conv {}x{} pad {} does not fit a {}x{} input", i, l.kernel,
                          l.kernel, l.pad, s.h, s.w));
        }
        a.weight_tensor.back() = static_cast<int>(a.tensors.size());
        a.tensors.push_back(
            {fmt::format("conv{}.w", params), {l.out, s.c, l.kernel, l.kernel}, layer});
        a.tensors.push_back({fmt::format("conv{}.b", params), {l.out}, layer});
        ++params;
        s = {l.out, oh, ow};
        break;
      }
      case LayerSpec::Kind::kRelu:
        break;
      case LayerSpec::Kind::kMaxPool:
        if (l.kernel < 1 || s.h < l.kernel || s.w < l.kernel) {
          return Status::InvalidArgument(
              fmt::format("layer {}: pool {} does not fit a {}x{} input", i, l.kernel, s.h, s.w));
        }
        s = {s.c, s.h / l.kernel, s.w / l.kernel};
        break;
    }
  }
  if (s.size() != classes) {
    return Status::InvalidArgument(
        fmt::format("the last layer gives {} outputs for {} classes", s.size(), classes));
  }
  a.shapes.push_back(s);
  a.layers = std::move(layers);
  return a;
}

std::vector<LayerSpec> MlpLayers(const std::vector<int>& hidden, int classes) {
  std::vector<LayerSpec> l;
  for (int h : hidden) {
    l.push_back({LayerSpec::Kind::kLinear, h});
    l.push_back({LayerSpec::Kind::kRelu});
  }
  l.push_back({LayerSpec::Kind::kLinear, classes});
  return l;
}

std::vector<LayerSpec> LeNetLayers(int classes) {
  using K = LayerSpec::Kind;
  return {{K::kConv, 6, 5, 2}, {K::kRelu},          {K::kMaxPool, 0, 2},  {K::kConv, 16, 5, 0},
          {K::kRelu},          {K::kMaxPool, 0, 2}, {K::kLinear, 120},    {K::kRelu},
          {K::kLinear, 84},    {K::kRelu},          {K::kLinear, classes}};
}

StatusOr<Architecture> BuildArchitecture(const std::string& model, Shape input, int classes,
                                         const std::vector<int>& hidden) {
  if (model == "mlp")
    return Resolve({static_cast<int>(input.size()), 1, 1}, classes, MlpLayers(hidden, classes));
  if (model == "cnn") return Resolve(input, classes, LeNetLayers(classes));
  return Status::InvalidArgument(fmt::format("unknown model '{}' (mlp, cnn)", model));
}

Params Model::Zeros() const {
  Params p;
  for (const TensorSpec& t : Tensors()) p.emplace_back(t.NumElements(), 0.0f);
  return p;
}

Params Model::Init(uint64_t seed) const {
  Params p = Zeros();
  std::mt19937_64 rng(seed);
  for (int w : arch_.weight_tensor) {
    if (w < 0) continue;
    const auto& shape = arch_.tensors[w].shape;
    const int64_t fan_in = arch_.tensors[w].NumElements() / shape[0];
    std::normal_distribution<float> he(0.0f, std::sqrt(2.0f / static_cast<float>(fan_in)));
    for (float& v : p[w]) v = he(rng);
  }
  return p;
}

StatusOr<double> Model::Accuracy(const Params& params, const float* x, const int32_t* y,
                                 int64_t n) {
  std::vector<int32_t> predicted(n);
  if (Status s = Predict(params, x, n, predicted.data()); !s.ok()) return s;
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) correct += predicted[i] == y[i];
  return n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
}

StatusOr<std::unique_ptr<Model>> MakeModel(Architecture arch, const std::string& device,
                                           int local_rank) {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return Status::InvalidArgument(fmt::format("unknown device '{}' (auto, cpu, cuda)", device));
  }
  std::string why;
  if (device == "cpu" || (device == "auto" && !CudaUsable(&why))) {
    spdlog::info("compute on the CPU{}", why.empty() ? "" : fmt::format(" ({})", why));
    return MakeCpuModel(std::move(arch));
  }
  auto m = MakeCudaModel(std::move(arch), local_rank);
  if (m.ok()) spdlog::info("compute on {}", (*m)->device());
  return m;
}

}  // namespace hetps
