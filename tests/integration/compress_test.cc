// Compressed pushes and pulls through live servers: what the servers apply is exactly what the
// codecs decode, per layer, with error feedback on the worker.
#include <gtest/gtest.h>

#include "common/compress/codec.h"
#include "common/compress/util.h"
#include "tests/integration/local_cluster.h"

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
