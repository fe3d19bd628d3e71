// Compressed pushes and pulls through live servers: what the servers apply is exactly what the
// codecs decode, per layer, with error feedback on the worker.
#include <gtest/gtest.h>

#include "common/compress/codec.h"
#include "common/compress/util.h"
#include "tests/integration/local_cluster.h"
#include "worker/train/gradient_encoders.h"

namespace hetps::testing {
namespace {

// Two workers, two servers, SGD with lr 1 from zeros under bsp: after a round the values are
// minus the sum of what the servers decoded.
class CompressTest : public ::testing::Test {
 protected:
  LocalCluster cluster_{
      {.servers = 2,
       .workers = 2,
       .scheduler_flags = {"--partition_bytes=4000"},
       .server_flags = {"--init=zeros", "--optimizer=sgd:lr=1", "--consistency=bsp"}}};
  const std::vector<TensorSpec> tensors_ = {{"w", {40, 50}, 0}, {"b", {50}, 1}};

  std::vector<std::unique_ptr<Client>> Connect(const std::string& push, const std::string& pull) {
    std::vector<std::unique_ptr<Client>> clients(2);
    LocalCluster::RunEach(2, [&](int i) {
      ClientOptions o = cluster_.ClientOpts();
      o.push_codec = push;
      o.pull_codec = pull;
      auto c = Client::Connect(o);
      ASSERT_TRUE(c.ok()) << c.status().message();
      ASSERT_TRUE((*c)->DeclareTensors(tensors_).ok());
      clients[i] = std::move(*c);
    });
    return clients;
  }
};

std::vector<float> Gradient(int64_t n, int worker) {
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 7 + worker * 13) % 23 - 11) / 8;
  return g;
}

TEST_F(CompressTest, ServersApplyExactlyWhatTheCodecDecodes) {
  const std::string spec = "default=topk:density=0.1;layer1=fp16";
  auto clients = Connect(spec, "none");
  std::vector<std::vector<float>> sum = {std::vector<float>(2000, 0.0f),
                                         std::vector<float>(50, 0.0f)};
  auto codecs = compress::LayerCodecs::Parse(spec);
  ASSERT_TRUE(codecs.ok());
  LocalCluster::RunEach(2, [&](int i) {
    Client& c = *clients[i];
    const auto gw = Gradient(2000, i), gb = Gradient(50, i);
    ASSERT_TRUE(c.Push("w", gw.data(), 2000).Wait().ok());
    ASSERT_TRUE(c.Push("b", gb.data(), 50).Wait().ok());
    ASSERT_TRUE(c.Clock().ok());
  });
  // Reference: each partition encoded and decoded on its own (top-k is per partition).
  for (int i = 0; i < 2; ++i) {
    for (int t = 0; t < 2; ++t) {
      const auto g = Gradient(t == 0 ? 2000 : 50, i);
      auto codec = *compress::MakeCodec(codecs->For(t));
      const ShardMap& map = clients[0]->shard_map();
      for (int32_t pid : map.PartitionsOf(map.TensorId(t == 0 ? "w" : "b"))) {
        const Partition& p = map.partitions()[pid];
        std::vector<uint8_t> bytes;
        std::vector<float> y(p.length);
        compress::CodecContext ctx;
        ctx.key = {0, pid, 0};
        codec->Encode(g.data() + p.offset, p.length, ctx, nullptr, bytes);
        ASSERT_TRUE(codec->Decode(bytes.data(), bytes.size(), p.length, ctx, y.data()).ok());
        for (int64_t j = 0; j < p.length; ++j) sum[t][p.offset + j] += y[j];
      }
    }
  }
  std::vector<float> w(2000), b(50);
  ASSERT_TRUE(clients[0]->Pull("w", w.data(), 2000).Wait().ok());
  ASSERT_TRUE(clients[0]->Pull("b", b.data(), 50).Wait().ok());
  for (int64_t j = 0; j < 2000; ++j) ASSERT_EQ(w[j], -sum[0][j]) << j;
  for (int64_t j = 0; j < 50; ++j) ASSERT_EQ(b[j], -sum[1][j]) << j;
  const ClientStats st = clients[0]->stats();
  EXPECT_EQ(st.raw_bytes_pushed, 4 * 2050);
  EXPECT_EQ(st.bytes_pushed, 8 * 200 + 2 * 50);  // 10% of w as (index, value), b as halves
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

TEST_F(CompressTest, ErrorFeedbackDeliversEveryGradientEventually) {
  // randomk without scaling at density 0.5 plus EF: after enough zero pushes the residual is
  // drained, so the servers hold minus the exact sum of the first push.
  auto clients = Connect("randomk:density=0.5,unbiased=0,ef=1", "none");
  LocalCluster::RunEach(2, [&](int i) {
    Client& c = *clients[i];
    const auto gw = Gradient(2000, i), gb = Gradient(50, i);
    const std::vector<float> zw(2000, 0.0f), zb(50, 0.0f);
    for (int step = 0; step < 40; ++step) {
      ASSERT_TRUE(c.Push("w", step ? zw.data() : gw.data(), 2000).Wait().ok());
      ASSERT_TRUE(c.Push("b", step ? zb.data() : gb.data(), 50).Wait().ok());
      ASSERT_TRUE(c.Clock().ok());
    }
  });
  std::vector<float> w(2000);
  ASSERT_TRUE(clients[1]->Pull("w", w.data(), 2000).Wait().ok());
  const auto g0 = Gradient(2000, 0), g1 = Gradient(2000, 1);
  for (int64_t j = 0; j < 2000; ++j) ASSERT_FLOAT_EQ(w[j], -(g0[j] + g1[j])) << j;
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

TEST_F(CompressTest, Fp16PullsHalveTheBytes) {
  auto clients = Connect("none", "fp16");
  LocalCluster::RunEach(2, [&](int i) {
    const std::vector<float> g(2000, i == 0 ? 1.0f / 3 : 0.0f), gb(50, 0.0f);
    ASSERT_TRUE(clients[i]->Push("w", g.data(), 2000).Wait().ok());
    ASSERT_TRUE(clients[i]->Push("b", gb.data(), 50).Wait().ok());
    ASSERT_TRUE(clients[i]->Clock().ok());
  });
  std::vector<float> w(2000);
  ASSERT_TRUE(clients[0]->Pull("w", w.data(), 2000).Wait().ok());
  for (float v : w) EXPECT_EQ(v, compress::FromHalf(compress::ToHalf(-1.0f / 3)));
  EXPECT_EQ(clients[0]->stats().bytes_pulled, 2 * 2000);
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

// PushEncoded with the host encoders (the device encoders' reference, behind the same
// interface) sends exactly what Push sends: worker 0 pushes, worker 1 pushes the same
// gradients encoded by the caller, error feedback included, so under bsp with SGD at lr 1 the
// servers hold minus twice what one worker's partition encoders decoded, step after step.
TEST_F(CompressTest, PushEncodedSendsWhatPushSends) {
  const std::string spec = "default=topk:density=0.1,ef=1;layer1=none";
  auto clients = Connect(spec, "none");
  auto encoders = MakeHostEncoders();
  constexpr int kSteps = 4;
  auto step_gradient = [](int64_t n, int step) {
    auto g = Gradient(n, 0);
    for (float& v : g) v *= static_cast<float>(step + 1);
    return g;
  };
  LocalCluster::RunEach(2, [&](int i) {
    Client& c = *clients[i];
    for (int step = 0; step < kSteps; ++step) {
      const auto gw = step_gradient(2000, step), gb = step_gradient(50, step);
      if (i == 0) {
        ASSERT_TRUE(c.Push("w", gw.data(), 2000).Wait().ok());
        ASSERT_TRUE(c.Push("b", gb.data(), 50).Wait().ok());
      } else {
        Status w = c.PushEncoded("w", 2000, encoders->For(gw.data())).Wait();
        ASSERT_TRUE(w.ok()) << w.message();
        ASSERT_TRUE(c.PushEncoded("b", 50, encoders->For(gb.data())).Wait().ok());
      }
      ASSERT_TRUE(c.Clock().ok());
    }
  });
  // The reference: one PartitionEncoder per partition of w; b travels raw.
  const ShardMap& map = clients[0]->shard_map();
  auto codecs = *compress::LayerCodecs::Parse(spec);
  auto codec = *compress::MakeCodec(codecs.For(0));
  std::vector<float> want_w(2000, 0.0f), want_b(50, 0.0f);
  for (int32_t pid : map.PartitionsOf(map.TensorId("w"))) {
    const Partition& p = map.partitions()[pid];
    compress::PartitionEncoder ref(codec, true, p.length);
    for (int step = 0; step < kSteps; ++step) {
      const auto g = step_gradient(2000, step);
      compress::CodecContext ctx;
      ctx.key = {0, pid, step};
      std::vector<uint8_t> bytes;
      std::vector<float> y(p.length);
      ASSERT_TRUE(ref.Encode(g.data() + p.offset, ctx, bytes).ok());
      ASSERT_TRUE(codec->Decode(bytes.data(), bytes.size(), p.length, ctx, y.data()).ok());
      for (int64_t j = 0; j < p.length; ++j) want_w[p.offset + j] -= 2 * y[j];
    }
    auto residual = encoders->Residual(pid);
    ASSERT_TRUE(residual.ok());
    EXPECT_EQ(*residual, ref.residual()) << "partition " << pid;
  }
  for (int step = 0; step < kSteps; ++step) {
    const auto g = step_gradient(50, step);
    for (int64_t j = 0; j < 50; ++j) want_b[j] -= 2 * g[j];
  }
  std::vector<float> w(2000), b(50);
  ASSERT_TRUE(clients[0]->Pull("w", w.data(), 2000).Wait().ok());
  ASSERT_TRUE(clients[0]->Pull("b", b.data(), 50).Wait().ok());
  for (int64_t j = 0; j < 2000; ++j) ASSERT_FLOAT_EQ(w[j], want_w[j]) << j;
  for (int64_t j = 0; j < 50; ++j) ASSERT_FLOAT_EQ(b[j], want_b[j]) << j;
  EXPECT_EQ(clients[0]->stats().bytes_pushed, clients[1]->stats().bytes_pushed);
  EXPECT_EQ(clients[0]->stats().raw_bytes_pushed, clients[1]->stats().raw_bytes_pushed);
  for (auto& c : clients) EXPECT_TRUE(c->Finish().ok());
}

// What PushEncoded asks of its encoder and what it refuses: one call per partition, in order,
// naming the slice, codec, step and row length; an encoder's error, or raw bytes of the wrong
// size, fail the push at once and nothing reaches the servers.
TEST_F(CompressTest, PushEncodedAsksForEachPartitionAndRefusesBadEncodings) {
  auto clients = Connect("default=qsgd:levels=4;layer1=none", "none");
  Client& c = *clients[0];
  const ShardMap& map = c.shard_map();
  const std::vector<int32_t>& parts = map.PartitionsOf(map.TensorId("w"));
  ASSERT_GT(parts.size(), 1u);
  LocalCluster::RunEach(2, [&](int i) { ASSERT_TRUE(clients[i]->Clock().ok()); });  // bsp
  std::vector<Client::PartitionSlice> asked;
  const std::vector<float> g = Gradient(2000, 0);
  auto host = MakeHostEncoders();
  auto recording = [&](const Client::PartitionSlice& slice, std::vector<uint8_t>& out) {
    asked.push_back(slice);
    return host->Encode(slice, g.data(), out);
  };
  ASSERT_TRUE(c.PushEncoded("w", 2000, recording).Wait().ok());
  ASSERT_EQ(asked.size(), parts.size());
  for (size_t k = 0; k < parts.size(); ++k) {
    const Partition& p = map.partitions()[parts[k]];
    EXPECT_EQ(asked[k].partition, parts[k]);
    EXPECT_EQ(asked[k].offset, p.offset);
    EXPECT_EQ(asked[k].length, p.length);
    EXPECT_EQ(asked[k].codec, "qsgd:levels=4");
    EXPECT_EQ(asked[k].step, 1);
    EXPECT_EQ(asked[k].cols, p.offset % 50 == 0 && p.length % 50 == 0 ? 50 : 0);
  }
  // Failures: the encoder's own error; raw floats of the wrong size; an unknown tensor.
  std::vector<float> before(50), after(50);
  ASSERT_TRUE(c.Pull("b", before.data(), 50).Wait().ok());
  Status failed = c.PushEncoded("b", 50, [](const Client::PartitionSlice&, std::vector<uint8_t>&) {
                     return Status::Internal("the device failed");
                   }).Wait();
  EXPECT_EQ(failed.code(), StatusCode::kInternal);
  EXPECT_EQ(failed.message(), "the device failed");
  Status short_raw =
      c.PushEncoded("b", 50, [](const Client::PartitionSlice& s, std::vector<uint8_t>& out) {
         out.assign(s.length * sizeof(float) - 4, 0);
         return Status();
       }).Wait();
  EXPECT_EQ(short_raw.code(), StatusCode::kSizeMismatch) << short_raw.message();
  EXPECT_EQ(c.PushEncoded("nope", 50, recording).Wait().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.PushEncoded("b", 49, recording).Wait().code(), StatusCode::kSizeMismatch);
  ASSERT_TRUE(c.Pull("b", after.data(), 50).Wait().ok());
  EXPECT_EQ(after, before);
  for (auto& client : clients) EXPECT_TRUE(client->Finish().ok());
}

TEST(CompressOptionsTest, BadCodecsAreRefusedAtConnect) {
  ClientOptions o;
  o.scheduler = "tcp://127.0.0.1:1";
  o.push_codec = "topk:density=2";
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("density=2"), std::string::npos) << c.status().message();
  o.push_codec = "none";
  o.pull_codec = "topk";
  c = Client::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("none or fp16"), std::string::npos);
}

}  // namespace
}  // namespace hetps::testing
