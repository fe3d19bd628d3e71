// SwitchSum: the aggregator's switch emulation (aggregator/switch_sum.h).
#include "aggregator/switch_sum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/fixed_point.h"

namespace hetps {
namespace {

constexpr int kChunk = 4, kSlots = 2;

SwitchSum Make(std::vector<int32_t> group, double wait_s = 1.0) {
  SwitchSum::Options o;
  o.spec.set_chunk(kChunk);
  o.spec.set_slots(kSlots);
  o.spec.set_clip(8);
  o.group = std::move(group);
  o.wait_s = wait_s;
  auto s = SwitchSum::Make(o, 1000);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

// Worker `w`'s chunk `index` of a partition of `elements`, at `clock`, in the switch's spec.
proto::Header ChunkOf(const SwitchSum& s, int32_t w, int64_t index, int64_t elements,
                      int64_t clock = 0) {
  proto::Header h;
  h.set_type(proto::PUSH);
  h.set_sender(w);
  h.set_partition(3);
  h.set_clock(clock);
  h.set_rank(1);
  h.set_request_id(100 * static_cast<uint64_t>(w) + static_cast<uint64_t>(clock));
  h.set_incarnation(77);
  h.set_seq(clock + 1);
  h.set_weight(1);
  proto::Chunk& c = *h.mutable_chunk();
  c.set_index(index);
  c.set_count((elements + kChunk - 1) / kChunk);
  c.set_offset(index * kChunk);
  c.set_elements(elements);
  h.set_num_elements(std::min<int64_t>(kChunk, elements - index * kChunk));
  *h.mutable_switch_spec() = s.spec();
  return h;
}

std::vector<uint32_t> Words(const SwitchSum& s, std::vector<float> x) {
  std::vector<uint32_t> w(x.size());
  EncodeFixedPoint(x.data(), static_cast<int64_t>(x.size()), 1.0,
                   {.clip = s.spec().clip(), .bits = s.spec().bits()}, w.data());
  return w;
}

std::vector<float> Values(const SwitchSum& s, std::span<const uint32_t> w) {
  std::vector<float> x(w.size());
  DecodeFixedPoint(w.data(), static_cast<int64_t>(w.size()),
                   {.clip = s.spec().clip(), .bits = s.spec().bits()}, x.data());
  return x;
}

TEST(SwitchSumTest, ChunksSumInSlotsOnceEveryMemberSentThemInOrderWithTheContributions) {
  SwitchSum s = Make({5, 9});
  EXPECT_EQ(s.spec().bits(), FixedPointBits(2));
  // A partition of 10 elements: chunks of 4, 4 and 2 words.
  auto a = s.Add(ChunkOf(s, 5, 0, 10), "a", Words(s, {1, 2, 3, 4}), 0);
  EXPECT_TRUE(a.refused.ok());
  EXPECT_FALSE(a.sum);
  auto b = s.Add(ChunkOf(s, 9, 0, 10), "b", Words(s, {0.5, -2, 0, 1}), 0);
  ASSERT_TRUE(b.sum);
  EXPECT_EQ(Values(s, b.sum->words), (std::vector<float>{1.5, 0, 3, 5}));
  EXPECT_EQ(b.sum->chunk.index(), 0);
  EXPECT_EQ(b.sum->rank, 1);
  ASSERT_TRUE(b.sum->head);  // the first names the pushes
  ASSERT_EQ(b.sum->head->contributions_size(), 2);
  EXPECT_EQ(b.sum->head->contributions(1).worker(), 9);
  EXPECT_EQ(b.sum->acks.size(), 2u);
  EXPECT_TRUE(b.sum->waiters.empty());
  // Chunk 1 of worker 9 first, then 5's: in any arrival order.
  EXPECT_FALSE(s.Add(ChunkOf(s, 9, 1, 10), "b", Words(s, {1, 1, 1, 1}), 0).sum);
  auto c = s.Add(ChunkOf(s, 5, 1, 10), "a", Words(s, {1, 1, 1, 1}), 0);
  ASSERT_TRUE(c.sum);
  EXPECT_FALSE(c.sum->head);
  EXPECT_EQ(Values(s, c.sum->words), (std::vector<float>{2, 2, 2, 2}));
  EXPECT_FALSE(s.Add(ChunkOf(s, 5, 2, 10), "a", Words(s, {7, 7}), 0).sum);
  auto d = s.Add(ChunkOf(s, 9, 2, 10), "b", Words(s, {-7, 1}), 0);
  ASSERT_TRUE(d.sum);
  EXPECT_EQ(d.sum->waiters.size(), 2u);  // the last: the pushes are answered upstream
  EXPECT_EQ(s.open(), 0u);
  EXPECT_EQ(s.chunks(), 3);
  // The slots held 2 slots of 4 words and their shadows, never the 10 elements twice over.
  EXPECT_EQ(s.peak_slot_bytes(), static_cast<size_t>(kSlots * kChunk * 2 * 4));
}

TEST(SwitchSumTest, ChunksThatDoNotFitAreRefusedAndBreakTheirStream) {
  SwitchSum s = Make({5, 9});
  // Not a member; a wrong shape; another fixed point; chunk 1 before chunk 0.
  EXPECT_EQ(s.Add(ChunkOf(s, 6, 0, 10), "x", Words(s, {1, 2, 3, 4}), 0).refused.code(),
            StatusCode::kUnregistered);
  proto::Header wrong = ChunkOf(s, 5, 0, 10);
  wrong.mutable_chunk()->set_count(2);
  EXPECT_EQ(s.Add(wrong, "a", Words(s, {1, 2, 3, 4}), 0).refused.code(), StatusCode::kSizeMismatch);
  proto::Header bits = ChunkOf(s, 5, 0, 10);
  bits.mutable_switch_spec()->set_bits(3);
  EXPECT_FALSE(s.Add(bits, "a", Words(s, {1, 2, 3, 4}), 0).refused.ok());
  EXPECT_FALSE(s.Add(ChunkOf(s, 5, 1, 10), "a", Words(s, {1, 2, 3, 4}), 0).refused.ok());
  EXPECT_EQ(s.open(), 0u);
  // A member's second push of the clock breaks the stream: both members are answered.
  EXPECT_TRUE(s.Add(ChunkOf(s, 5, 0, 10), "a", Words(s, {1, 2, 3, 4}), 0).refused.ok());
  auto twice = s.Add(ChunkOf(s, 5, 0, 10), "a", Words(s, {1, 2, 3, 4}), 0);
  EXPECT_FALSE(twice.refused.ok());
  ASSERT_TRUE(twice.failed);
  EXPECT_EQ(twice.failed->waiters.size(), 1u);
  // The failed stream's later chunks are refused, once per worker, then silently.
  auto late = s.Add(ChunkOf(s, 9, 0, 10), "b", Words(s, {1, 2, 3, 4}), 0);
  EXPECT_FALSE(late.refused.ok());
  EXPECT_FALSE(late.silent);
  EXPECT_TRUE(s.Add(ChunkOf(s, 9, 1, 10), "b", Words(s, {1, 2, 3, 4}), 0).silent);
}

TEST(SwitchSumTest, AStreamWithoutProgressOrWithADeadMemberFailsAndTheNextClockStreams) {
  SwitchSum s = Make({5, 9}, /*wait_s=*/0.5);
  EXPECT_TRUE(s.Add(ChunkOf(s, 5, 0, 10), "a", Words(s, {1, 2, 3, 4}), 0).refused.ok());
  EXPECT_TRUE(s.Due(0.4).empty());
  auto due = s.Due(0.6);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].why.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(due[0].why.message().find("9"), std::string::npos);  // who did not push
  // The next clock streams; worker 9 dies mid-stream: the stream fails, and the group is 5.
  EXPECT_TRUE(s.Add(ChunkOf(s, 5, 0, 10, 1), "a", Words(s, {1, 2, 3, 4}), 1).refused.ok());
  auto gone = s.Forget(9);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].waiters.size(), 1u);
  auto alone = s.Add(ChunkOf(s, 5, 0, 10, 2), "a", Words(s, {1, 2, 3, 4}), 2);
  ASSERT_TRUE(alone.sum);
  EXPECT_EQ(Values(s, alone.sum->words), (std::vector<float>{1, 2, 3, 4}));
}

// Fixed-point exactness: the integer sum of quantized values is the quantized sum, whatever
// the order; values that are multiples of the unit come back exactly.
TEST(SwitchSumTest, IntegerSumsOfQuantizedValuesAreTheQuantizedSum) {
  SwitchSum s = Make({1, 2, 3});
  const FixedPoint fp{.clip = 8, .bits = s.spec().bits()};
  const double unit = 8.0 / (1 << fp.bits);
  const std::vector<float> x = {0.3f, -1.7f, 7.99f, -8.0f}, y = {2.2f, 0.1f, -3.3f, 5.5f},
                           z = {-0.0001f, 3.0f, 1e-7f, 2.5f};
  std::vector<uint32_t> wx(4), wy(4), wz(4);
  EncodeFixedPoint(x.data(), 4, 1.0, fp, wx.data());
  EncodeFixedPoint(y.data(), 4, 1.0, fp, wy.data());
  EncodeFixedPoint(z.data(), 4, 1.0, fp, wz.data());
  s.Add(ChunkOf(s, 3, 0, 4), "c", wz, 0);
  s.Add(ChunkOf(s, 1, 0, 4), "a", wx, 0);
  auto sum = s.Add(ChunkOf(s, 2, 0, 4), "b", wy, 0);
  ASSERT_TRUE(sum.sum);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sum.sum->words[i], wx[i] + wy[i] + wz[i]);
    const double real = static_cast<double>(x[i]) + y[i] + z[i];
    EXPECT_NEAR(Values(s, sum.sum->words)[i], real, 1.5 * unit + 1e-6);
  }
}

}  // namespace
}  // namespace hetps
