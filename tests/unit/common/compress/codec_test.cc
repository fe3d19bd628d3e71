// The codec interface for every codec: spec strings, per-layer choices, encoded sizes, round
// trips, error-feedback conservation and malformed encodings.
#include "common/compress/codec.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace hetps::compress {
namespace {

std::vector<float> Gaussian(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

std::shared_ptr<const Codec> Make(const std::string& text) {
  auto spec = ParseCodecSpec(text);
  EXPECT_TRUE(spec.ok()) << text << ": " << spec.status().message();
  auto codec = MakeCodec(*spec);
  EXPECT_TRUE(codec.ok());
  return *codec;
}

const std::vector<std::string> kAll =
    EveryCodec({"none", "fp16", "topk:density=0.05", "randomk:density=0.05,seed=3",
                "dgc:density=0.05,momentum=0.5", "qsgd:levels=16", "terngrad", "onebit", "efsign",
                "powersgd:rank=2"});

CodecContext Context(int64_t step, int64_t cols = 0) {
  CodecContext ctx;
  ctx.key = {7, 3, step};
  ctx.cols = cols;
  return ctx;
}

TEST(CodecSpecTest, ParsesNamesAndParameters) {
  auto s = ParseCodecSpec("topk:density=0.01,ef=1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->name, "topk");
  EXPECT_TRUE(s->ef);
  EXPECT_EQ(s->params.at("density"), "0.01");
  EXPECT_EQ(s->WireName(), "topk:density=0.01");
  EXPECT_EQ(s->ToString(), "topk:density=0.01,ef=1");
  EXPECT_FALSE(ParseCodecSpec("topk")->ef);
  EXPECT_TRUE(ParseCodecSpec("efsign")->ef);  // sign codecs and powersgd default to ef=1
  EXPECT_FALSE(ParseCodecSpec("powersgd:ef=0")->ef);
  EXPECT_EQ(ParseCodecSpec("qsgd:seed=2,levels=4")->WireName(), "qsgd:levels=4,seed=2");
}

TEST(CodecSpecTest, RefusesBadSpecsWithClearErrors) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"zip", "unknown codec 'zip'"},
      {"topk:density=0", "density=0: must be a number in (0, 1]"},
      {"topk:density=1.5", "must be a number in (0, 1]"},
      {"topk:density=abc", "not a number"},
      {"topk:k=5", "codec 'topk' has no parameter 'k'"},
      {"topk:density", "expected key=value"},
      {"qsgd:levels=2.5", "whole number"},
      {"topk:ef=2", "ef=2"},
      {"topk:density=0.1,density=0.2", "given twice"},
  };
  for (const auto& [text, message] : bad) {
    auto s = ParseCodecSpec(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(message), std::string::npos) << s.status().message();
  }
}

TEST(CodecSpecTest, PerLayerChoices) {
  auto lc = LayerCodecs::Parse("default=topk:density=0.01,ef=1;layer0=none;layer3=qsgd:levels=16");
  ASSERT_TRUE(lc.ok()) << lc.status().message();
  EXPECT_EQ(lc->For(0).name, "none");
  EXPECT_EQ(lc->For(1).ToString(), "topk:density=0.01,ef=1");
  EXPECT_EQ(lc->For(3).WireName(), "qsgd:levels=16");
  EXPECT_EQ(lc->ToString(), "default=topk:density=0.01,ef=1;layer0=none;layer3=qsgd:levels=16");
  EXPECT_EQ(LayerCodecs::Parse("fp16")->For(9).name, "fp16");
  EXPECT_EQ(LayerCodecs::Parse("layer2=fp16")->For(0).name, "none");  // default default
  EXPECT_FALSE(LayerCodecs::Parse("default=topk;layerx=none").ok());
  EXPECT_FALSE(LayerCodecs::Parse("default=topk;layer1=zip").ok());
  EXPECT_FALSE(LayerCodecs::Parse("default=topk;layer-1=none").ok());
}

// Found by spec_fuzz: "powersgd:rank=1,ef=0" printed as "powersgd:rank=1", which parses back
// with error feedback on (PowerSGD's default). Every codec, with ef on and off, alone and as a
// per-layer choice, prints as text that parses to the same spec.
TEST(CodecSpecTest, SpecsPrintAsTextThatParsesBackToThem) {
  for (const std::string& name : Codecs().Names()) {
    for (const char* ef : {"0", "1"}) {
      const std::string text = fmt::format("{}:ef={}", name, ef);
      auto spec = ParseCodecSpec(text);
      ASSERT_TRUE(spec.ok()) << text << ": " << spec.status().message();
      EXPECT_EQ(spec->ef, std::string(ef) == "1") << text;
      auto again = ParseCodecSpec(spec->ToString());
      ASSERT_TRUE(again.ok()) << spec->ToString() << ": " << again.status().message();
      EXPECT_EQ(again->ef, spec->ef) << text << " printed as " << spec->ToString();
      EXPECT_EQ(again->ToString(), spec->ToString());
    }
  }
  EXPECT_EQ(ParseCodecSpec("powersgd:rank=1,ef=0")->ToString(), "powersgd:rank=1,ef=0");
  EXPECT_EQ(ParseCodecSpec("powersgd:rank=1")->ToString(), "powersgd:rank=1,ef=1");
  EXPECT_EQ(ParseCodecSpec("topk:density=0.01")->ToString(), "topk:density=0.01");
  for (const std::string text : {"default=powersgd:rank=1,ef=0;layer0=fp16;layer3=none",
                                 "default=onebit:ef=0;layer1=efsign"}) {
    auto lc = LayerCodecs::Parse(text);
    ASSERT_TRUE(lc.ok()) << lc.status().message();
    auto again = LayerCodecs::Parse(lc->ToString());
    ASSERT_TRUE(again.ok()) << lc->ToString() << ": " << again.status().message();
    EXPECT_EQ(again->ToString(), lc->ToString());
    EXPECT_EQ(again->For(0).ef, lc->For(0).ef) << text;
    EXPECT_EQ(again->For(7).ef, lc->For(7).ef) << text;
  }
}

TEST(CodecTest, EncodedSizeMatchesTheFormula) {
  const int64_t n = 1000;
  const auto x = Gaussian(n, 1);
  const std::map<std::string, int64_t> want = {
      {"none", 4 * n},
      {"fp16", 2 * n},
      {"topk:density=0.05", 8 * 50},
      {"randomk:density=0.05,seed=3", 4 * 50},
      {"qsgd:levels=16", 4 + (n * 6 + 7) / 8},  // 1 sign + ceil(log2 17) = 5 level bits
      {"terngrad", 4 + n / 4},
      {"onebit", 8 + n / 8},
      {"efsign", 4 + n / 8},
      {"powersgd:rank=2", 12 + 4 * 2 * (20 + 50)},  // as a 20 x 50 matrix
  };
  for (const auto& [text, bytes] : want) {
    auto codec = Make(text);
    auto state = codec->NewState(n);
    std::vector<uint8_t> out;
    const CodecContext ctx = Context(0, 50);
    codec->Encode(x.data(), n, ctx, state.get(), out);
    EXPECT_EQ(static_cast<int64_t>(out.size()), bytes) << text;
    EXPECT_EQ(codec->EncodedBytes(n, ctx), bytes) << text;
  }
}

TEST(CodecTest, EveryCodecRoundTripsWithinItsError) {
  const int64_t n = 4096;
  const auto x = Gaussian(n, 2);
  double norm2 = 0;
  for (float v : x) norm2 += static_cast<double>(v) * v;
  // Relative squared error ||D(C(x)) - x||^2 / ||x||^2 allowed per codec (one encode, no EF).
  const std::map<std::string, double> bound = {
      {"none", 0},
      {"fp16", 1e-6},
      {"topk:density=0.05", 1 - 0.05},
      {"randomk:density=0.05,seed=3", 1 / 0.05 + 1},
      {"dgc:density=0.05,momentum=0.5", 1.0},
      {"qsgd:levels=16", std::min(4096.0 / 256, 64.0 / 16)},
      {"terngrad", 8.0},
      {"onebit", 1.0},
      {"efsign", 1.0},
      {"powersgd:rank=2", 1.0},
  };
  for (const auto& text : kAll) {
    ASSERT_TRUE(bound.contains(text)) << text << ": a new codec: give its error bound above";
    auto codec = Make(text);
    auto state = codec->NewState(n);
    std::vector<uint8_t> out;
    std::vector<float> y(n);
    const CodecContext ctx = Context(5, 64);
    codec->Encode(x.data(), n, ctx, state.get(), out);
    ASSERT_TRUE(codec->Decode(out.data(), out.size(), n, ctx, y.data()).ok()) << text;
    double err = 0;
    for (int64_t i = 0; i < n; ++i) err += (y[i] - x[i]) * static_cast<double>(y[i] - x[i]);
    EXPECT_LE(err / norm2, bound.at(text) + 1e-9) << text;
  }
}

// Error feedback keeps what was not sent: sum of decoded + residual == sum of gradients.
TEST(CodecTest, ErrorFeedbackConservesEveryGradient) {
  const int64_t n = 2048;
  for (const auto& text : kAll) {
    auto spec = ParseCodecSpec(text);
    ASSERT_TRUE(spec.ok());
    PartitionEncoder enc(*MakeCodec(*spec), /*ef=*/true, n);
    std::vector<double> sent(n, 0.0), total(n, 0.0);
    std::vector<uint8_t> out;
    std::vector<float> y(n);
    for (int step = 0; step < 20; ++step) {
      const auto g = Gaussian(n, 100 + step, 0.1f);
      const CodecContext ctx = Context(step, 32);
      ASSERT_TRUE(enc.Encode(g.data(), ctx, out).ok()) << text;
      ASSERT_TRUE(enc.codec().Decode(out.data(), out.size(), n, ctx, y.data()).ok()) << text;
      for (int64_t i = 0; i < n; ++i) {
        sent[i] += y[i];
        total[i] += g[i];
      }
    }
    double worst = 0, residual = 0;
    for (int64_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::abs(sent[i] + enc.residual()[i] - total[i]));
      residual = std::max(residual, std::abs(static_cast<double>(enc.residual()[i])));
    }
    EXPECT_LT(worst, 1e-5 * std::max(1.0, residual)) << text;
  }
}

TEST(CodecTest, MalformedEncodingsAreRejectedNotRead) {
  const int64_t n = 777;
  const auto x = Gaussian(n, 3);
  std::mt19937 rng(4);
  for (const auto& text : kAll) {
    auto codec = Make(text);
    auto state = codec->NewState(n);
    std::vector<uint8_t> out;
    std::vector<float> y(n);
    const CodecContext ctx = Context(1, 37);
    codec->Encode(x.data(), n, ctx, state.get(), out);
    std::vector<uint8_t> shorter(out.begin(), out.end() - 1), longer = out;
    longer.push_back(0);
    EXPECT_FALSE(codec->Decode(shorter.data(), shorter.size(), n, ctx, y.data()).ok()) << text;
    EXPECT_FALSE(codec->Decode(longer.data(), longer.size(), n, ctx, y.data()).ok()) << text;
    if (text.rfind("dgc", 0) != 0) {  // a DGC encoding is (index, value) pairs of any length
      std::vector<float> twice(2 * n);
      EXPECT_FALSE(codec->Decode(out.data(), out.size(), 2 * n, ctx, twice.data()).ok()) << text;
    }
    EXPECT_FALSE(codec->Decode(nullptr, 0, n, ctx, y.data()).ok()) << text;
    for (int trial = 0; trial < 50; ++trial) {  // garbage of the right size: an error or values
      std::vector<uint8_t> junk(out.size());
      for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
      (void)codec->Decode(junk.data(), junk.size(), n, ctx, y.data());
    }
  }
}

TEST(CodecTest, SparseIndicesAreChecked) {
  auto topk = Make("topk:density=0.5");
  const int64_t n = 4;  // k = 2
  std::vector<float> y(n);
  auto encode = [](std::vector<uint32_t> idx, std::vector<float> val) {
    std::vector<uint8_t> b(4 * (idx.size() + val.size()));
    std::memcpy(b.data(), idx.data(), 4 * idx.size());
    std::memcpy(b.data() + 4 * idx.size(), val.data(), 4 * val.size());
    return b;
  };
  const CodecContext ctx;
  auto good = encode({1, 3}, {0.5f, -2.0f});
  ASSERT_TRUE(topk->Decode(good.data(), good.size(), n, ctx, y.data()).ok());
  EXPECT_EQ(y, (std::vector<float>{0, 0.5f, 0, -2.0f}));
  for (const auto& bad : {encode({1, 4}, {1, 1}), encode({3, 1}, {1, 1}), encode({2, 2}, {1, 1}),
                          encode({0, 1}, {NAN, 1})}) {
    auto s = topk->Decode(bad.data(), bad.size(), n, ctx, y.data());
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kMalformed) << s.message();
  }
}

}  // namespace
}  // namespace hetps::compress
