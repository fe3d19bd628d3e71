// ShmChannel's slots (first fit, coalesced on free, reserved as they are first reached) and the
// co-location rule for endpoints.
#include "worker/shm_channel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace hetps {
namespace {

std::unique_ptr<ShmChannel> NewChannel(size_t bytes) {
  static uint64_t tag = 0;
  auto channel = ShmChannel::Create(++tag, 0, bytes);
  EXPECT_TRUE(channel.ok()) << channel.status().ToString();
  return std::move(*channel);
}

TEST(ShmChannelTest, SlotsAreAlignedDisjointAndBoundedByTheSegment) {
  auto c = NewChannel(1 << 20);
  auto a = c->Allocate(100);
  auto b = c->Allocate(1000);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a % 64, 0);
  EXPECT_EQ(*b % 64, 0);
  EXPECT_GE(*b, *a + 100);
  EXPECT_FALSE(c->Allocate((1 << 20) + 1));
  EXPECT_FALSE(c->Allocate(0));
  EXPECT_FALSE(c->Allocate(-5));
  EXPECT_EQ(c->allocated_bytes(), 128 + 1024);
}

TEST(ShmChannelTest, FreedSlotsCoalesceSoTheWholeSegmentIsOneSlotAgain) {
  const int64_t size = 1 << 20;
  auto c = NewChannel(size);
  std::vector<int64_t> slots;
  for (int i = 0; i < 16; ++i) {
    auto s = c->Allocate(size / 16);
    ASSERT_TRUE(s);
    slots.push_back(*s);
  }
  EXPECT_FALSE(c->Allocate(64));  // full
  // Free in a scrambled order: neighbours merge whichever side goes first.
  std::mt19937 rng(7);
  std::shuffle(slots.begin(), slots.end(), rng);
  for (int64_t s : slots) c->Free(s);
  EXPECT_EQ(c->allocated_bytes(), 0);
  auto whole = c->Allocate(size);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, 0);
  c->Free(12345);  // not a slot: ignored
  c->Free(*whole);
  c->Free(*whole);  // twice: ignored
  EXPECT_EQ(c->allocated_bytes(), 0);
}

TEST(ShmChannelTest, MemoryIsReservedOnlyAsFarAsSlotsReach) {
  auto c = NewChannel(64 << 20);
  EXPECT_EQ(c->reserved_bytes(), 0u);
  auto a = c->Allocate(1000);
  ASSERT_TRUE(a);
  EXPECT_EQ(c->reserved_bytes(), size_t{4} << 20);  // one step
  std::memset(c->At(*a), 1, 1000);
  auto big = c->Allocate(10 << 20);
  ASSERT_TRUE(big);
  EXPECT_EQ(c->reserved_bytes(), size_t{12} << 20);
  c->Free(*big);
  c->Free(*a);
  EXPECT_EQ(c->reserved_bytes(), size_t{12} << 20);  // kept for the next ones
}

TEST(ShmChannelTest, LocalEndpointsAreThoseOfThisNetworkNamespace) {
  EXPECT_TRUE(IsLocalEndpoint("tcp://127.0.0.1:5000"));
  EXPECT_TRUE(IsLocalEndpoint("tcp://127.0.0.2:5000"));
  EXPECT_TRUE(IsLocalEndpoint("tcp://localhost:5000"));
  EXPECT_TRUE(IsLocalEndpoint("ipc:///tmp/hetps.sock"));
  // 192.0.2.0/24 is reserved for documentation: no interface of a test machine has it.
  EXPECT_FALSE(IsLocalEndpoint("tcp://192.0.2.7:5000"));
  EXPECT_FALSE(IsLocalEndpoint("tcp://*:5000"));
  EXPECT_FALSE(IsLocalEndpoint("tcp://127.0.0.1"));
  EXPECT_FALSE(IsLocalEndpoint("inproc://x"));
  EXPECT_FALSE(IsLocalEndpoint(""));
}

}  // namespace
}  // namespace hetps
