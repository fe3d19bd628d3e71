// The aggregation tier's slot pool (aggregator/slot_pool.h): the sum of a group's fixed-point
// chunks is exactly the sum of the quantized values in any arrival order, a 16 MiB partition
// streams through a pool of a few slots without it ever holding more than slots x chunk words,
// retransmissions count once (and get the completed sum again), and bad contributions are
// refused with the reason while the pool goes on.
#include "aggregator/slot_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "common/secagg/masks.h"

namespace hetps {
namespace {

using Outcome = SlotPool::Outcome;

SlotPool Pool(int slots, int chunk, int group) {
  auto p = SlotPool::Make(slots, chunk, group);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(*p);
}

// 8 contributors' random values, quantized for a group of 8, summed through the pool in a
// shuffled order: the decoded sum is the quantized values' sum exactly (integers), and within
// 8 quantization steps of the real sum.
TEST(SlotPoolTest, TheSumIsExactlyTheQuantizedValuesSumInAnyOrder) {
  constexpr int kGroup = 8, kChunk = 64;
  const secagg::FixedPoint fp{4, secagg::FixedPointBits(kGroup)};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 1.5f);
  std::vector<std::vector<float>> x(kGroup, std::vector<float>(kChunk));
  std::vector<std::vector<uint32_t>> words(kGroup, std::vector<uint32_t>(kChunk));
  for (int m = 0; m < kGroup; ++m) {
    for (float& v : x[m]) v = normal(rng);
    secagg::Encode(x[m].data(), kChunk, 1.0, fp, words[m].data());
  }
  std::vector<int> order(kGroup);
  std::iota(order.begin(), order.end(), 0);
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    SlotPool pool = Pool(2, kChunk, kGroup);
    std::vector<uint32_t> sum;
    for (size_t i = 0; i < order.size(); ++i) {
      auto r = pool.Add({.partition = 1, .clock = 4, .chunk = 0}, order[i], words[order[i]]);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->outcome, i + 1 < order.size() ? Outcome::kHeld : Outcome::kComplete);
      if (r->outcome == Outcome::kComplete) sum.assign(r->sum.begin(), r->sum.end());
    }
    ASSERT_EQ(sum.size(), static_cast<size_t>(kChunk));
    for (int i = 0; i < kChunk; ++i) {
      int64_t expected = 0;  // the quantized values, added as integers
      for (int m = 0; m < kGroup; ++m) expected += static_cast<int32_t>(words[m][i]);
      ASSERT_EQ(static_cast<int32_t>(sum[i]), expected) << "word " << i;
    }
    std::vector<float> decoded(kChunk);
    secagg::Decode(sum.data(), kChunk, fp, decoded.data());
    for (int i = 0; i < kChunk; ++i) {
      double real = 0;
      for (int m = 0; m < kGroup; ++m) real += std::clamp(x[m][i], -4.0f, 4.0f);
      EXPECT_NEAR(decoded[i], real, kGroup * fp.clip / std::ldexp(1.0, fp.bits));
    }
  }
}

// A 16 MiB partition (4M words) from 4 contributors streams through 4 slots of 256 words: each
// contributor keeps at most 4 chunks in flight, interleaved with the others; every chunk's sum
// comes out once and right, and the pool's memory stays what Make allocated.
TEST(SlotPoolTest, AWholePartitionStreamsThroughAFewSlotsInBoundedMemory) {
  constexpr int kGroup = 4, kChunk = 256, kSlots = 4;
  constexpr int64_t kWords = 4 << 20, kChunks = kWords / kChunk;
  SlotPool pool = Pool(kSlots, kChunk, kGroup);
  const size_t bytes = pool.bytes();
  EXPECT_EQ(bytes, size_t{2} * kSlots * kChunk * sizeof(uint32_t));
  // Contributor m's word i is m * 1000 + (i mod 1000): the sum of word i is 6000 + 4 (i mod 1000).
  auto word = [](int m, int64_t i) { return static_cast<uint32_t>(m * 1000 + i % 1000); };
  std::vector<int64_t> next(kGroup, 0);   // each contributor's next chunk to send
  std::vector<int64_t> acked(kGroup, 0);  // chunks whose sums came back to it
  std::vector<uint32_t> chunk(kChunk);
  int64_t done = 0;
  std::mt19937 rng(5);
  while (done < kChunks) {
    const int m = static_cast<int>(rng() % kGroup);
    if (next[m] >= kChunks || next[m] >= done + kSlots) continue;  // its window is full
    for (int i = 0; i < kChunk; ++i) chunk[i] = word(m, next[m] * kChunk + i);
    auto r = pool.Add({.partition = 0, .clock = 1, .chunk = next[m]}, m, chunk);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_NE(r->outcome, Outcome::kDuplicate);
    if (r->outcome == Outcome::kFull) continue;  // its slot still sums an earlier chunk
    if (r->outcome == Outcome::kComplete) {
      for (int i = 0; i < kChunk; ++i) {
        const int64_t w = next[m] * kChunk + i;
        ASSERT_EQ(r->sum[static_cast<size_t>(i)], static_cast<uint32_t>(6000 + 4 * (w % 1000)))
            << "chunk " << next[m] << " word " << i;
      }
      ++done;
    }
    ++next[m];
    ASSERT_LE(pool.busy(), kSlots);
  }
  EXPECT_EQ(pool.completed(), kChunks);
  EXPECT_EQ(pool.bytes(), bytes) << "the pool never grew";
  EXPECT_EQ(pool.busy(), 0);
}

// A retransmitted contribution counts once; one for the chunk a slot completed last is answered
// with its sum again; another chunk's contribution for a busy slot is refused as full.
TEST(SlotPoolTest, RetransmissionsCountOnceAndAFinishedChunkIsAnsweredAgain) {
  SlotPool pool = Pool(1, 4, 2);
  const std::vector<uint32_t> a = {1, 2, 3, 4}, b = {10, 20, 30, 40};
  const SlotPool::Key k0{.partition = 2, .clock = 7, .chunk = 0};
  EXPECT_EQ(pool.Add(k0, 0, a)->outcome, Outcome::kHeld);
  EXPECT_EQ(pool.Add(k0, 0, a)->outcome, Outcome::kDuplicate);
  EXPECT_EQ(pool.Add({.partition = 2, .clock = 7, .chunk = 1}, 0, a)->outcome, Outcome::kFull);
  auto done = pool.Add(k0, 1, b);
  ASSERT_EQ(done->outcome, Outcome::kComplete);
  EXPECT_EQ(std::vector<uint32_t>(done->sum.begin(), done->sum.end()),
            (std::vector<uint32_t>{11, 22, 33, 44}));
  auto again = pool.Add(k0, 1, b);  // its result was lost: the same sum, counted once
  ASSERT_EQ(again->outcome, Outcome::kResent);
  EXPECT_EQ(std::vector<uint32_t>(again->sum.begin(), again->sum.end()),
            (std::vector<uint32_t>{11, 22, 33, 44}));
  EXPECT_EQ(pool.completed(), 1);
  // The next chunk takes the slot; the same clock's other partition is another key.
  EXPECT_EQ(pool.Add({.partition = 3, .clock = 7, .chunk = 0}, 1, b)->outcome, Outcome::kHeld);
}

// Bad contributions get a clear error and change nothing: a member outside the group, an empty
// or oversized chunk, a size other than the first contributor's, a negative index; and a pool
// that could not work is refused at Make.
TEST(SlotPoolTest, BadContributionsAreRefusedAndThePoolGoesOn) {
  SlotPool pool = Pool(2, 4, 2);
  const SlotPool::Key k{.partition = 0, .clock = 0, .chunk = 0};
  const std::vector<uint32_t> four = {1, 1, 1, 1}, five = {1, 1, 1, 1, 1}, three = {1, 1, 1};
  EXPECT_EQ(pool.Add(k, 2, four).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Add(k, -1, four).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Add(k, 0, five).status().code(), StatusCode::kSizeMismatch);
  EXPECT_EQ(pool.Add(k, 0, {}).status().code(), StatusCode::kSizeMismatch);
  EXPECT_EQ(pool.Add({.chunk = -1}, 0, four).status().code(), StatusCode::kSizeMismatch);
  EXPECT_EQ(pool.busy(), 0) << "nothing was taken";
  EXPECT_EQ(pool.Add(k, 0, four)->outcome, Outcome::kHeld);
  auto odd = pool.Add(k, 1, three);
  EXPECT_EQ(odd.status().code(), StatusCode::kSizeMismatch) << odd.status().ToString();
  auto done = pool.Add(k, 1, four);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->outcome, Outcome::kComplete);
  EXPECT_EQ(done->sum[0], 2u);
  for (auto [slots, chunk, group] : {std::tuple{0, 4, 2}, {2, 0, 2}, {2, 4, 0}, {2, 4, 65}}) {
    EXPECT_FALSE(SlotPool::Make(slots, chunk, group).ok()) << slots << " " << chunk << " " << group;
  }
}

}  // namespace
}  // namespace hetps
