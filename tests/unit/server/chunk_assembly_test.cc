// ChunkAssembly: a switch's chunk sums gathered on the server (server/chunk_assembly.h).
#include "server/chunk_assembly.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/fixed_point.h"

namespace hetps {
namespace {

constexpr int kChunk = 4;
constexpr FixedPoint kFixed{.clip = 8, .bits = 20};

// Aggregator 8's chunk sum `index` of request `request` (partition 3 of `elements`).
Envelope ChunkSum(int64_t index, uint64_t request, std::vector<float> x, int64_t elements = 10) {
  Envelope env;
  env.identity = "agg";
  proto::Header& h = env.message.header;
  h.set_type(proto::PUSH);
  h.set_sender(8);
  h.set_partition(3);
  h.set_request_id(request);
  if (index == 0) h.add_contributions()->set_worker(5);
  proto::Chunk& c = *h.mutable_chunk();
  c.set_index(index);
  c.set_count((elements + kChunk - 1) / kChunk);
  c.set_offset(index * kChunk);
  c.set_elements(elements);
  h.set_num_elements(static_cast<int64_t>(x.size()));
  h.mutable_switch_spec()->set_chunk(kChunk);
  h.mutable_switch_spec()->set_clip(kFixed.clip);
  h.mutable_switch_spec()->set_bits(kFixed.bits);
  std::vector<uint32_t> w(x.size());
  EncodeFixedPoint(x.data(), static_cast<int64_t>(x.size()), 1.0, kFixed, w.data());
  zmq::message_t frame(w.size() * 4);
  std::memcpy(frame.data(), w.data(), frame.size());
  env.message.payload.push_back(std::move(frame));
  return env;
}

// The server gathers a switch's chunk sums of one push until it is whole, refusing what does
// not follow; a newer push of the partition replaces an unfinished one.
TEST(ChunkAssemblyTest, ChunkSumsInOrderMakeTheWholePushAndAnythingElseIsRefused) {
  ChunkAssembly a;
  auto e0 = ChunkSum(0, 1, {1, 2, 3, 4});
  EXPECT_FALSE(a.Add(e0, 10).whole);
  auto skip = ChunkSum(2, 1, {5, 6});  // chunk 2 before chunk 1: refused, the push ends
  EXPECT_FALSE(a.Add(skip, 10).error.ok());
  EXPECT_EQ(a.open(), 0u);
  auto f0 = ChunkSum(0, 2, {1, 2, 3, 4});
  EXPECT_FALSE(a.Add(f0, 10).whole);
  auto g0 = ChunkSum(0, 3, {1, 1, 1, 1});  // a newer push of the partition replaces it
  auto replaced = a.Add(g0, 10);
  ASSERT_TRUE(replaced.replaced);
  EXPECT_EQ(replaced.replaced->second, 2u);
  auto wrong = ChunkSum(1, 3, {1, 1, 1, 1});
  EXPECT_FALSE(a.Add(wrong, 12).error.ok());  // another partition size
  auto bits = ChunkSum(0, 5, {1, 1, 1, 1});
  bits.message.header.mutable_switch_spec()->set_bits(40);
  EXPECT_FALSE(a.Add(bits, 10).error.ok());  // no fixed point
  auto short_frame = ChunkSum(0, 6, {1, 1, 1});
  short_frame.message.header.set_num_elements(4);
  EXPECT_FALSE(a.Add(short_frame, 10).error.ok());
  auto nobody = ChunkSum(0, 7, {1, 1, 1, 1});
  nobody.message.header.clear_contributions();
  EXPECT_FALSE(a.Add(nobody, 10).error.ok());  // a first chunk that names no push
  auto h0 = ChunkSum(0, 4, {1, 1, 1, 1});
  EXPECT_TRUE(a.Add(h0, 10).error.ok());
  auto h1 = ChunkSum(1, 4, {2, 2, 2, 2});
  EXPECT_FALSE(a.Add(h1, 10).whole);
  auto h2 = ChunkSum(2, 4, {3, -3});
  auto done = a.Add(h2, 10);
  ASSERT_TRUE(done.whole);
  const proto::Header& h = done.whole->message.header;
  EXPECT_FALSE(h.has_chunk());
  EXPECT_EQ(h.num_elements(), 10);
  EXPECT_EQ(h.contributions_size(), 1);
  std::vector<float> got(10);
  std::memcpy(got.data(), done.whole->message.payload[0].data(), 40);
  EXPECT_EQ(got, (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2, 3, -3}));
  EXPECT_EQ(a.open(), 0u);
  // What a dead aggregator left is dropped.
  auto k0 = ChunkSum(0, 9, {1, 1, 1, 1});
  a.Add(k0, 10);
  EXPECT_EQ(a.open(), 1u);
  a.Forget(8);
  EXPECT_EQ(a.open(), 0u);
}

}  // namespace
}  // namespace hetps
