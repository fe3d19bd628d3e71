// The CUDA codecs against their CPU references: byte-identical encodings on shared vectors,
// the same decodes and the same error-feedback residuals; the trainer's device encoders against
// its host ones. Skipped visibly without a GPU.
#include "worker/compress/gpu_codec.h"

#include <gtest/gtest.h>

#include <random>

#include "worker/train/gradient_encoders.h"

namespace hetps::compress::gpu {
namespace {

using hetps::Client;
using hetps::MakeDeviceEncoders;
using hetps::MakeHostEncoders;

std::vector<float> Data(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  if (n > 40) {  // ties, zeros, large values and a negative zero
    x[3] = x[17] = x[29] = 2.5f;
    x[5] = 0.0f;
    x[6] = -0.0f;
    x[11] = 1e6f;
  }
  return x;
}

// Every registered codec with a device twin (gpu::Supported), and variants of their parameters.
std::vector<std::string> WithTwins(std::vector<std::string> specs) {
  std::erase_if(specs, [](const std::string& s) { return !Supported(s.substr(0, s.find(':'))); });
  return specs;
}

const std::vector<std::string> kCodecs = WithTwins(compress::EveryCodec(
    {"none", "fp16", "topk:density=0.01", "topk:density=0.3", "randomk:density=0.05,seed=4",
     "randomk:density=0.1,unbiased=0", "qsgd:levels=16", "qsgd:levels=3", "onebit", "efsign",
     "terngrad", "terngrad:seed=3", "dgc:density=0.01", "dgc:density=0.05,momentum=0.5,sample=0.05",
     "dgc:density=0.01,warmup=2,epoch=1"}));

TEST(GpuCodecTest, UnavailableWithoutAGpuSaysWhy) {
  std::string why;
  if (Usable(&why)) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(why.empty());
  auto e = Encoder::Create(*ParseCodecSpec("fp16"), 10);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kFailedPrecondition);
}

TEST(GpuCodecTest, EncodingsAreByteIdenticalToTheCpu) {
  std::string why;
  if (!Usable(&why)) GTEST_SKIP() << "no GPU: " << why;
  for (const std::string& text : kCodecs) {
    for (int64_t n : {1, 7, 1000, 4099, 1 << 20}) {
      CodecSpec spec = *ParseCodecSpec(text);
      spec.ef = false;
      auto gpu = Encoder::Create(spec, n);
      ASSERT_TRUE(gpu.ok()) << text << ": " << gpu.status().message();
      auto cpu = *MakeCodec(spec);
      auto state = cpu->NewState(n);  // dgc's momentum and accumulation; nullptr for the rest
      for (int64_t step = 0; step < 3; ++step) {
        const auto x = Data(n, n + step);
        CodecContext ctx;
        ctx.key = {0, 5, step};
        std::vector<uint8_t> want, got;
        cpu->Encode(x.data(), n, ctx, state.get(), want);
        ASSERT_TRUE((*gpu)->Encode(x.data(), ctx, got).ok()) << text;
        ASSERT_EQ(got, want) << text << " n " << n << " step " << step;
        auto unsent = (*gpu)->Unsent();
        ASSERT_TRUE(unsent.ok());
        if (const auto* v = cpu->Unsent(state.get())) {
          ASSERT_EQ(*unsent, *v) << text << " n " << n << " step " << step;
        } else {
          ASSERT_TRUE(unsent->empty()) << text;
        }
        std::vector<float> dc(n), dg(n);
        ASSERT_TRUE(cpu->Decode(want.data(), want.size(), n, ctx, dc.data()).ok());
        ASSERT_TRUE((*gpu)->Decode(want, ctx, dg.data()).ok()) << text;
        ASSERT_EQ(dg, dc) << text << " n " << n;
      }
    }
  }
}

TEST(GpuCodecTest, ErrorFeedbackResidualMatchesTheCpu) {
  std::string why;
  if (!Usable(&why)) GTEST_SKIP() << "no GPU: " << why;
  const int64_t n = 10000;
  for (const std::string& text : kCodecs) {
    CodecSpec spec = *ParseCodecSpec(text);
    spec.ef = true;
    auto gpu = Encoder::Create(spec, n);
    ASSERT_TRUE(gpu.ok()) << gpu.status().message();
    PartitionEncoder cpu(*MakeCodec(spec), true, n);
    for (int64_t step = 0; step < 5; ++step) {
      const auto g = Data(n, 100 + step);
      CodecContext ctx;
      ctx.key = {0, 2, step};
      std::vector<uint8_t> want, got;
      ASSERT_TRUE(cpu.Encode(g.data(), ctx, want).ok());
      ASSERT_TRUE((*gpu)->Encode(g.data(), ctx, got).ok());
      ASSERT_EQ(got, want) << text << " step " << step;
    }
    auto residual = (*gpu)->Residual();
    ASSERT_TRUE(residual.ok());
    EXPECT_EQ(*residual, cpu.residual()) << text;
    auto unsent = (*gpu)->Unsent();
    ASSERT_TRUE(unsent.ok());
    EXPECT_EQ(*unsent, cpu.unsent() ? *cpu.unsent() : std::vector<float>()) << text;
  }
}

// The trainer's device encoders (worker/train/gradient_encoders.h) against the host ones, for
// every codec: the twins on the device, powersgd (no twin) and raw slices through the host;
// byte-identical pushes and residuals over several steps.
TEST(GpuCodecTest, DeviceGradientEncodersMatchTheHostOnes) {
  std::string why;
  if (!Usable(&why)) GTEST_SKIP() << "no GPU: " << why;
  const int64_t rows = 40, cols = 50, n = rows * cols;
  std::vector<std::string> specs = {"none", "powersgd:rank=2"};
  for (const std::string& c : kCodecs) specs.push_back(c);
  for (const std::string& text : specs) {
    for (bool ef : {false, true}) {
      if (text == "none" && ef) continue;
      CodecSpec spec = *ParseCodecSpec(text);
      spec.ef = ef;
      auto device = MakeDeviceEncoders();
      ASSERT_TRUE(device.ok()) << device.status().message();
      auto host = MakeHostEncoders();
      auto g = DeviceFloats::Create(n);
      ASSERT_TRUE(g.ok()) << g.status().message();
      for (int64_t step = 0; step < 3; ++step) {
        const auto x = Data(n, 7 + step);
        ASSERT_TRUE((*g)->CopyFrom(x.data()).ok());
        for (int32_t part = 0; part < 2; ++part) {  // two partitions of 20 whole rows
          Client::PartitionSlice slice;
          slice.partition = 9 + part;
          slice.offset = part * n / 2;
          slice.length = n / 2;
          slice.codec = spec.ToString();
          slice.step = step;
          slice.cols = cols;
          std::vector<uint8_t> want, got;
          ASSERT_TRUE(host->Encode(slice, x.data(), want).ok()) << text;
          Status s = (*device)->Encode(slice, (*g)->get(), got);
          ASSERT_TRUE(s.ok()) << text << ": " << s.message();
          ASSERT_EQ(got, want) << spec.ToString() << " step " << step << " partition " << part;
        }
      }
      for (int32_t part : {9, 10}) {
        auto a = (*device)->Residual(part), b = host->Residual(part);
        ASSERT_TRUE(a.ok() && b.ok());
        EXPECT_EQ(*a, *b) << spec.ToString();
      }
      EXPECT_EQ((*device)->device_partitions(), Supported(spec.name) && spec.name != "none" ? 2 : 0)
          << spec.ToString();
    }
  }
}

}  // namespace
}  // namespace hetps::compress::gpu
