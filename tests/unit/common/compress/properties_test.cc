// Each codec's property from ALGORITHMS.md §8.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/compress/codec.h"
#include "common/compress/topk.h"

namespace hetps::compress {
namespace {

std::vector<float> Gaussian(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

std::shared_ptr<const Codec> Make(const std::string& text) {
  return *MakeCodec(*ParseCodecSpec(text));
}

std::vector<float> RoundTrip(const Codec& c, const std::vector<float>& x, CodecContext ctx,
                             CodecState* state = nullptr) {
  std::vector<uint8_t> out;
  std::vector<float> y(x.size());
  c.Encode(x.data(), static_cast<int64_t>(x.size()), ctx, state, out);
  EXPECT_TRUE(c.Decode(out.data(), out.size(), static_cast<int64_t>(x.size()), ctx, y.data()).ok());
  return y;
}

CodecContext Step(int64_t step, int64_t cols = 0) {
  CodecContext ctx;
  ctx.key = {0, 9, step};
  ctx.cols = cols;
  return ctx;
}

double Norm2(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}

// Every codec at its most expansive settings stays within what a server reads per push.
TEST(CodecTest, NoEncodingExceedsTheLargestFrameAServerReads) {
  const std::vector<std::string> specs =
      EveryCodec({"none", "fp16", "topk:density=1", "randomk:density=1", "dgc:density=1",
                  "qsgd:levels=65535", "terngrad", "onebit", "efsign", "powersgd:rank=64"});
  for (const std::string& spec : specs) {
    auto codec = Make(spec);
    for (auto [n, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 0}, {7, 0}, {4096, 0}, {4096, 64}, {4096, 2}, {100000, 1000}}) {
      auto state = codec->NewState(n);
      std::vector<uint8_t> out;
      const std::vector<float> x = Gaussian(n, 3);
      for (int64_t step = 0; step < 3; ++step) {
        codec->Encode(x.data(), n, Step(step, cols), state.get(), out);
        EXPECT_LE(static_cast<int64_t>(out.size()), MaxEncodedBytes(n))
            << spec << " n=" << n << " cols=" << cols;
      }
    }
  }
}

TEST(Fp16Test, RoundsToNearestAndSaturates) {
  auto c = Make("fp16");
  const std::vector<float> x = {1.0f, -2.5f, 1e-3f, 3.14159f, 1e6f, -1e6f, 0.0f};
  const auto y = RoundTrip(*c, x, Step(0));
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i], std::abs(x[i]) * 0x1p-11f);
  EXPECT_EQ(y[4], 65504.0f);
  EXPECT_EQ(y[5], -65504.0f);
  EXPECT_EQ(y[6], 0.0f);
}

TEST(TopKTest, KeepsExactlyTheLargestMagnitudesAndContracts) {
  auto c = Make("topk:density=0.01");
  for (int64_t n : {100, 5000, 300000}) {
    const auto x = Gaussian(n, n);
    const auto y = RoundTrip(*c, x, Step(0));
    const int64_t k = (n + 99) / 100;
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return std::abs(x[a]) > std::abs(x[b]); });
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(y[order[j]], j < k ? x[order[j]] : 0.0f) << "n " << n << " rank " << j;
    }
    double err = 0;
    for (int64_t i = 0; i < n; ++i) err += (y[i] - x[i]) * static_cast<double>(y[i] - x[i]);
    EXPECT_LE(err, (1.0 - static_cast<double>(k) / n) * Norm2(x));
  }
}

TEST(TopKTest, TiesGoToTheLowerIndex) {
  std::vector<float> x(1000, 1.0f);
  x[500] = -2.0f;
  std::vector<uint32_t> idx;
  SelectTopK(x.data(), 1000, 4, idx);
  EXPECT_EQ(idx, (std::vector<uint32_t>{0, 1, 2, 500}));
}

TEST(RandomKTest, UnbiasedWithTheSecondMomentOfSamplingWithoutReplacement) {
  auto c = Make("randomk:density=0.1,seed=5");
  const int64_t n = 200;
  const auto x = Gaussian(n, 1);
  const int trials = 4000;
  std::vector<double> mean(n, 0.0);
  double second = 0;
  for (int t = 0; t < trials; ++t) {
    const auto y = RoundTrip(*c, x, Step(t));
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; ++i) {
      mean[i] += y[i] / trials;
      nonzero += y[i] != 0;
    }
    EXPECT_EQ(nonzero, 20);  // k distinct indices
    second += Norm2(y) / trials;
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(mean[i], x[i], 0.25) << i;  // ~4 sigma
  EXPECT_NEAR(second / Norm2(x), 10.0, 0.5);                              // d / k
}

TEST(DgcTest, SendsBetweenPointEightAndOnePointThreeKAndConservesMomentum) {
  auto c = Make("dgc:density=0.01,momentum=0");
  const int64_t n = 100000;
  auto state = c->NewState(n);
  std::vector<double> sent(n, 0.0), total(n, 0.0);
  for (int step = 0; step < 10; ++step) {
    const auto g = Gaussian(n, 40 + step);
    std::vector<uint8_t> out;
    c->Encode(g.data(), n, Step(step), state.get(), out);
    uint32_t count;
    std::memcpy(&count, out.data(), 4);
    EXPECT_GE(count, 800u);
    EXPECT_LE(count, 1300u);
    std::vector<float> y(n);
    ASSERT_TRUE(c->Decode(out.data(), out.size(), n, Step(step), y.data()).ok());
    for (int64_t i = 0; i < n; ++i) {
      sent[i] += y[i];
      total[i] += g[i];
    }
  }
  const std::vector<float>& v = *c->Unsent(state.get());
  for (int64_t i = 0; i < n; i += 97) EXPECT_NEAR(sent[i] + v[i], total[i], 1e-4);
}

TEST(DgcTest, WarmUpShrinksTheDensityExponentially) {
  auto c = Make("dgc:density=0.001,warmup=4,epoch=10,momentum=0");
  const int64_t n = 100000;
  std::vector<uint32_t> counts;
  for (int step : {0, 10, 20, 30, 40}) {
    auto state = c->NewState(n);
    const auto g = Gaussian(n, step);
    std::vector<uint8_t> out;
    c->Encode(g.data(), n, Step(step), state.get(), out);
    uint32_t count;
    std::memcpy(&count, out.data(), 4);
    counts.push_back(count);
  }
  // density^(1/5), ^(2/5), ... ^(5/5): 25%, 6.3%, 1.6%, 0.4%, 0.1% of n.
  const double want[] = {25119, 6310, 1585, 398, 100};
  for (int e = 0; e < 5; ++e) {
    EXPECT_GE(counts[e], 0.8 * want[e]) << e;
    EXPECT_LE(counts[e], 1.3 * want[e]) << e;
  }
}

TEST(QsgdTest, UnbiasedWithinTheVarianceBound) {
  const int64_t n = 256;
  const auto x = Gaussian(n, 2);
  for (int s : {1, 4, 16}) {
    auto c = Make("qsgd:levels=" + std::to_string(s));
    const int trials = 3000;
    std::vector<double> mean(n, 0.0);
    double variance = 0;
    for (int t = 0; t < trials; ++t) {
      const auto y = RoundTrip(*c, x, Step(t));
      double e = 0;
      for (int64_t i = 0; i < n; ++i) {
        mean[i] += y[i] / trials;
        e += (y[i] - x[i]) * static_cast<double>(y[i] - x[i]);
      }
      variance += e / trials;
    }
    const double bound = std::min(n / double(s * s), std::sqrt(double(n)) / s) * Norm2(x);
    EXPECT_LE(variance, bound) << "s " << s;
    const double spread = std::sqrt(Norm2(x)) / s;  // one level step
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(mean[i], x[i], 5 * spread / std::sqrt(trials)) << i;
  }
}

TEST(TernGradTest, ThreeValuesAndUnbiasedForTheClippedGradient) {
  auto c = Make("terngrad");
  const int64_t n = 100;
  auto x = Gaussian(n, 3);
  x[7] = 50;  // clipped to 2.5 sigma
  double mean = 0, sq = 0;
  for (float v : x) {
    mean += v / n;
    sq += static_cast<double>(v) * v / n;
  }
  const float clip = static_cast<float>(2.5 * std::sqrt(sq - mean * mean));
  const int trials = 4000;
  std::vector<double> avg(n, 0.0);
  for (int t = 0; t < trials; ++t) {
    const auto y = RoundTrip(*c, x, Step(t));
    float s = 0;
    for (float v : y) s = std::max(s, std::abs(v));
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(y[i] == 0 || std::abs(y[i]) == s);
      avg[i] += y[i] / trials;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const double clipped = std::clamp(x[i], -clip, clip);
    EXPECT_NEAR(avg[i], clipped, 0.1 * clip) << i;
  }
}

TEST(OneBitTest, KeepsEachSignsSum) {
  auto c = Make("onebit");
  const auto x = Gaussian(1001, 4);
  const auto y = RoundTrip(*c, x, Step(0));
  double xs = 0, ys = 0, xn = 0, yn = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    (x[i] < 0 ? xn : xs) += x[i];
    (x[i] < 0 ? yn : ys) += y[i];
    EXPECT_EQ(x[i] < 0, y[i] < 0);
  }
  EXPECT_NEAR(ys, xs, 1e-3);
  EXPECT_NEAR(yn, xn, 1e-3);
}

TEST(EfSignTest, KeepsTheL1Norm) {
  auto c = Make("efsign");
  const auto x = Gaussian(999, 5);
  const auto y = RoundTrip(*c, x, Step(0));
  double lx = 0, ly = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    lx += std::abs(x[i]);
    ly += std::abs(y[i]);
    EXPECT_EQ(x[i] < 0, y[i] < 0);
  }
  EXPECT_NEAR(ly, lx, 1e-3 * lx);
}

TEST(PowerSgdTest, LowRankAndExactOnALowRankMatrix) {
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  auto c = Make("powersgd:rank=2,ef=0");
  const int rows = 40, cols = 30;
  auto a = Gaussian(rows * 2, 6), b = Gaussian(2 * cols, 7);
  M low = Eigen::Map<M>(a.data(), rows, 2) * Eigen::Map<M>(b.data(), 2, cols);
  std::vector<float> x(low.data(), low.data() + low.size());
  auto state = c->NewState(x.size());
  std::vector<float> y;
  for (int step = 0; step < 2; ++step) y = RoundTrip(*c, x, Step(step, cols), state.get());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], x[i], 1e-3 * std::max(1.0f, std::abs(x[i])));
  // A full-rank matrix comes back with rank <= 2.
  auto full = Gaussian(rows * cols, 8);
  auto fresh = c->NewState(full.size());
  auto approx = RoundTrip(*c, full, Step(0, cols), fresh.get());
  Eigen::JacobiSVD<M> svd(Eigen::Map<M>(approx.data(), rows, cols));
  const auto sv = svd.singularValues();
  EXPECT_GT(sv(1), 1e-3f);
  EXPECT_LT(sv(2), 1e-4f * sv(0));
  // 1-D (and not whole rows) travels raw.
  const auto v = Gaussian(50, 9);
  EXPECT_EQ(RoundTrip(*c, v, Step(0, 0)), v);
}

}  // namespace
}  // namespace hetps::compress
