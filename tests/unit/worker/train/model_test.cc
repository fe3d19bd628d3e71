#include "worker/train/model.h"

#include <gtest/gtest.h>

#include <random>

#include "worker/compress/gpu_codec.h"

namespace hetps {
namespace {

using K = LayerSpec::Kind;

Architecture Arch(Shape input, int classes, std::vector<LayerSpec> layers) {
  auto a = Resolve(input, classes, std::move(layers));
  EXPECT_TRUE(a.ok()) << a.status().message();
  return *a;
}

// A small conv net that exercises padding, pooling, two convolutions and a dense head.
Architecture SmallCnn() {
  return Arch({2, 6, 6}, 3,
              {{K::kConv, 3, 3, 1},
               {K::kRelu},
               {K::kMaxPool, 0, 2},
               {K::kConv, 4, 2, 0},
               {K::kRelu},
               {K::kLinear, 3}});
}

Params Perturbed(const Model& m, uint64_t seed) {
  Params p = m.Init(seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  for (auto& b : p) {
    for (float& v : b) v += 0.1f * d(rng);  // non-zero biases too
  }
  return p;
}

std::vector<float> RandomInputs(int64_t n, uint64_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// Central differences of the loss against every parameter.
void ExpectGradientsMatchFiniteDifferences(Model& m, int batch, std::vector<int32_t> y) {
  Params p = Perturbed(m, 11);
  const std::vector<float> x = RandomInputs(batch * m.arch().input.size(), 5);
  Params g = m.Zeros(), scratch = m.Zeros();
  ASSERT_TRUE(m.LossAndGradients(p, x.data(), y.data(), batch, g).ok());
  const float eps = 2e-3f;
  int64_t checked = 0, expected = 0;
  for (size_t t = 0; t < p.size(); ++t) {
    expected += static_cast<int64_t>(p[t].size());
    for (size_t i = 0; i < p[t].size(); ++i) {
      const float keep = p[t][i];
      p[t][i] = keep + eps;
      const double up = *m.LossAndGradients(p, x.data(), y.data(), batch, scratch);
      p[t][i] = keep - eps;
      const double down = *m.LossAndGradients(p, x.data(), y.data(), batch, scratch);
      p[t][i] = keep;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(g[t][i], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << m.Tensors()[t].name << " [" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, expected);
}

TEST(ModelTest, MlpHasOneTensorPerWeightAndBiasWithItsLayer) {
  auto a = BuildArchitecture("mlp", {1, 28, 28}, 10, {256, 128});
  ASSERT_TRUE(a.ok());
  const auto& t = a->tensors;
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].name, "fc0.w");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{256, 784}));
  EXPECT_EQ(t[5].name, "fc2.b");
  EXPECT_EQ(t[5].shape, (std::vector<int64_t>{10}));
  EXPECT_EQ(t[4].layer, 2);
}

TEST(ModelTest, CnnIsLeNetWithItsLayers) {
  auto a = BuildArchitecture("cnn", {1, 28, 28}, 10, {});
  ASSERT_TRUE(a.ok()) << a.status().message();
  std::vector<std::string> names;
  for (const TensorSpec& t : a->tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv0.w", "conv0.b", "conv1.w", "conv1.b", "fc2.w",
                                             "fc2.b", "fc3.w", "fc3.b", "fc4.w", "fc4.b"}));
  EXPECT_EQ(a->tensors[0].shape, (std::vector<int64_t>{6, 1, 5, 5}));
  EXPECT_EQ(a->tensors[2].shape, (std::vector<int64_t>{16, 6, 5, 5}));
  EXPECT_EQ(a->tensors[4].shape, (std::vector<int64_t>{120, 400}));  // 16 x 5 x 5 after pooling
  EXPECT_EQ(a->tensors[9].layer, 4);
  int64_t parameters = 0;
  for (const TensorSpec& t : a->tensors) parameters += t.NumElements();
  EXPECT_EQ(parameters, 156 + 2416 + 48120 + 10164 + 850);
}

TEST(ModelTest, ArchitecturesThatDoNotFitAreRefused) {
  EXPECT_FALSE(Resolve({1, 4, 4}, 3, {{K::kConv, 2, 5, 0}, {K::kLinear, 3}}).ok());
  EXPECT_FALSE(Resolve({1, 4, 4}, 3, {{K::kMaxPool, 0, 8}, {K::kLinear, 3}}).ok());
  EXPECT_FALSE(Resolve({1, 4, 4}, 3, {{K::kLinear, 4}}).ok());  // 4 outputs for 3 classes
  auto bad = BuildArchitecture("resnet", {1, 28, 28}, 10, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown model 'resnet'"), std::string::npos);
}

TEST(ModelTest, MlpGradientsMatchFiniteDifferences) {
  auto m = MakeCpuModel(Arch({6, 1, 1}, 3, MlpLayers({5, 4}, 3)));
  ExpectGradientsMatchFiniteDifferences(*m, 4, {0, 2, 1, 2});
}

TEST(ModelTest, CnnGradientsMatchFiniteDifferences) {
  auto m = MakeCpuModel(SmallCnn());
  ExpectGradientsMatchFiniteDifferences(*m, 3, {0, 2, 1});
}

TEST(ModelTest, ThreadsDoNotChangeTheResult) {
  auto m = MakeCpuModel(SmallCnn());
  Params p = Perturbed(*m, 3);
  const int batch = 17;
  const std::vector<float> x = RandomInputs(batch * m->arch().input.size(), 8);
  std::vector<int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = i % 3;
  Params one = m->Zeros(), two = m->Zeros();
  SetComputeThreads(1);
  const double l1 = *m->LossAndGradients(p, x.data(), y.data(), batch, one);
  SetComputeThreads(2);
  const double l2 = *m->LossAndGradients(p, x.data(), y.data(), batch, two);
  SetComputeThreads(1);
  EXPECT_DOUBLE_EQ(l1, l2);
  for (size_t t = 0; t < one.size(); ++t) {
    for (size_t i = 0; i < one[t].size(); ++i) EXPECT_NEAR(one[t][i], two[t][i], 1e-6);
  }
}

// Vertical vs horizontal bars at random positions: only a convolution-friendly rule separates
// them, so the net must learn through its conv layers.
TEST(ModelTest, CnnLearnsBarOrientation) {
  auto m = MakeCpuModel(
      Arch({1, 8, 8}, 2, {{K::kConv, 4, 3, 1}, {K::kRelu}, {K::kMaxPool, 0, 2}, {K::kLinear, 2}}));
  std::mt19937 rng(2);
  const int n = 128;
  std::vector<float> x(n * 64, 0.0f);
  std::vector<int32_t> y(n);
  for (int i = 0; i < n; ++i) {
    y[i] = i % 2;
    const int at = static_cast<int>(rng() % 8);
    for (int j = 0; j < 8; ++j) x[i * 64 + (y[i] ? at * 8 + j : j * 8 + at)] = 1.0f;
  }
  Params p = m->Init(4), g = m->Zeros();
  const double before = *m->LossAndGradients(p, x.data(), y.data(), n, g);
  for (int step = 0; step < 200; ++step) {
    ASSERT_TRUE(m->LossAndGradients(p, x.data(), y.data(), n, g).ok());
    for (size_t t = 0; t < p.size(); ++t) {
      for (size_t i = 0; i < p[t].size(); ++i) p[t][i] -= 0.2f * g[t][i];
    }
  }
  EXPECT_LT(*m->LossAndGradients(p, x.data(), y.data(), n, g), 0.2 * before);
  EXPECT_GT(*m->Accuracy(p, x.data(), y.data(), n), 0.95);
}

TEST(ModelTest, MlpLearnsASeparableProblem) {
  auto m = MakeCpuModel(Arch({2, 1, 1}, 2, MlpLayers({8}, 2)));
  Params p = m->Init(3), g = m->Zeros();
  std::mt19937 rng(9);
  std::normal_distribution<float> d;
  const int n = 256;
  std::vector<float> x(2 * n);
  std::vector<int32_t> y(n);
  for (int i = 0; i < n; ++i) {
    x[2 * i] = d(rng);
    x[2 * i + 1] = d(rng);
    y[i] = x[2 * i] + x[2 * i + 1] > 0 ? 1 : 0;
  }
  const double before = *m->LossAndGradients(p, x.data(), y.data(), n, g);
  for (int step = 0; step < 300; ++step) {
    ASSERT_TRUE(m->LossAndGradients(p, x.data(), y.data(), n, g).ok());
    for (size_t t = 0; t < p.size(); ++t) {
      for (size_t i = 0; i < p[t].size(); ++i) p[t][i] -= 0.5f * g[t][i];
    }
  }
  EXPECT_LT(*m->LossAndGradients(p, x.data(), y.data(), n, g), 0.3 * before);
  EXPECT_GT(*m->Accuracy(p, x.data(), y.data(), n), 0.95);
}

TEST(ModelTest, DeviceChoice) {
  auto a = SmallCnn();
  auto cpu = MakeModel(a, "cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->device(), "cpu");
  // A worker's GPU is its local rank mod the visible devices.
  EXPECT_EQ(DeviceForLocalRank(0, 2), 0);
  EXPECT_EQ(DeviceForLocalRank(3, 2), 1);
  EXPECT_EQ(DeviceForLocalRank(5, 8), 5);
  EXPECT_EQ(DeviceForLocalRank(-1, 4), 0);
  EXPECT_EQ(DeviceForLocalRank(3, 0), 0);
  auto bad = MakeModel(a, "tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown device 'tpu'"), std::string::npos);
  auto any = MakeModel(a, "auto");
  ASSERT_TRUE(any.ok());
  std::string why;
  if (CudaUsable(&why)) {
    EXPECT_NE((*any)->device(), "cpu");
  } else {
    EXPECT_EQ((*any)->device(), "cpu");
    auto cuda = MakeModel(a, "cuda");
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(cuda.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.status().message().find(why), std::string::npos);
  }
}

// The CUDA model against its CPU reference: loss, every gradient, predictions.
void ExpectCudaMatchesCpu(const Architecture& a, int batch) {
  std::string why;
  if (!CudaUsable(&why)) GTEST_SKIP() << "no GPU: " << why;
  auto gpu = MakeCudaModel(a);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  auto cpu = MakeCpuModel(a);
  Params p = Perturbed(*cpu, 21);
  const std::vector<float> x = RandomInputs(batch * a.input.size(), 6);
  std::vector<int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = (i * 7) % a.classes;
  Params gc = cpu->Zeros(), gg = cpu->Zeros();
  for (int round = 0; round < 2; ++round) {  // the second reuses the device buffers
    const double lc = *cpu->LossAndGradients(p, x.data(), y.data(), batch, gc);
    auto lg = (*gpu)->LossAndGradients(p, x.data(), y.data(), batch, gg);
    ASSERT_TRUE(lg.ok()) << lg.status().message();
    EXPECT_NEAR(*lg, lc, 1e-4 * std::max(1.0, std::abs(lc)));
    for (size_t t = 0; t < gc.size(); ++t) {
      float scale = 0;
      for (float v : gc[t]) scale = std::max(scale, std::abs(v));
      for (size_t i = 0; i < gc[t].size(); ++i) {
        ASSERT_NEAR(gg[t][i], gc[t][i], 1e-4f * std::max(scale, 1e-3f))
            << a.tensors[t].name << " [" << i << "]";
      }
    }
  }
  // Device-resident: parameters uploaded from pinned host buffers, the gradients left on the
  // device, where they match the CPU's too.
  EXPECT_EQ(cpu->device_training(), nullptr);
  DeviceTraining* d = (*gpu)->device_training();
  ASSERT_NE(d, nullptr);
  Params pinned = p;
  ASSERT_TRUE(d->Pin(pinned).ok());
  for (size_t t = 0; t < pinned.size(); ++t) ASSERT_TRUE(d->Upload(t, pinned[t].data()).ok());
  auto ld = d->Step(x.data(), y.data(), batch);
  ASSERT_TRUE(ld.ok()) << ld.status().message();
  const double lc = *cpu->LossAndGradients(p, x.data(), y.data(), batch, gc);
  EXPECT_NEAR(*ld, lc, 1e-4 * std::max(1.0, std::abs(lc)));
  for (size_t t = 0; t < gc.size(); ++t) {
    std::vector<float> on_device(gc[t].size());
    ASSERT_TRUE(compress::gpu::CopyToHost(d->Gradient(t), on_device.size(), on_device.data()).ok());
    float scale = 0;
    for (float v : gc[t]) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < gc[t].size(); ++i) {
      ASSERT_NEAR(on_device[i], gc[t][i], 1e-4f * std::max(scale, 1e-3f))
          << a.tensors[t].name << " [" << i << "] on the device";
    }
  }
  d->Unpin();
  std::vector<int32_t> pc(batch), pg(batch);
  ASSERT_TRUE(cpu->Predict(p, x.data(), batch, pc.data()).ok());
  ASSERT_TRUE((*gpu)->Predict(p, x.data(), batch, pg.data()).ok());
  EXPECT_EQ(pc, pg);
}

TEST(ModelTest, CudaMlpMatchesCpu) {
  ExpectCudaMatchesCpu(Arch({1, 28, 28}, 10, MlpLayers({256, 128}, 10)), 33);
}

TEST(ModelTest, CudaSmallCnnMatchesCpu) { ExpectCudaMatchesCpu(SmallCnn(), 5); }

TEST(ModelTest, CudaLeNetMatchesCpu) {
  ExpectCudaMatchesCpu(*BuildArchitecture("cnn", {1, 28, 28}, 10, {}), 65);
}

}  // namespace
}  // namespace hetps
