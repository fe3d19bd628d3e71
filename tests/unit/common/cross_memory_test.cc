// Cross memory attach: copies to and from a process (this one, and a child), across page
// boundaries, and the errors of an address the process does not map and of a process gone.
#include "common/cross_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numeric>
#include <vector>

namespace hetps {
namespace {

uint64_t At(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(CrossMemoryTest, ReadsAndWritesAProcessesMemoryAcrossPages) {
  std::vector<uint32_t> theirs(300000);  // over a MiB: many pages, split by the kernel at will
  std::iota(theirs.begin(), theirs.end(), 7u);
  std::vector<uint32_t> mine(theirs.size(), 0);
  ASSERT_TRUE(ReadProcessMemory(getpid(), At(theirs.data()), mine.data(), mine.size() * 4).ok());
  EXPECT_EQ(mine, theirs);
  std::fill(mine.begin(), mine.end(), 0xabcdef01u);
  // Across a page boundary whichever way the vector lies: nothing before or after is touched.
  ASSERT_TRUE(WriteProcessMemory(getpid(), At(&theirs[2]), mine.data(), 1023 * 4).ok());
  EXPECT_EQ(theirs[1], 8u);
  EXPECT_EQ(theirs[2], 0xabcdef01u);
  EXPECT_EQ(theirs[1024], 0xabcdef01u);
  EXPECT_EQ(theirs[1025], 7u + 1025u) << "written past the end";
}

TEST(CrossMemoryTest, AnAddressNotMappedOrAProcessGoneIsAnError) {
  uint64_t word = 0;
  Status s = ReadProcessMemory(getpid(), 64, &word, sizeof(word));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  s = WriteProcessMemory(getpid(), 64, &word, sizeof(word));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // Mapped at the start, not at the end: short of all the bytes is an error too.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* two = static_cast<uint8_t*>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(two, MAP_FAILED);
  ASSERT_EQ(munmap(two + page, page), 0);
  uint64_t pair[2] = {0, 0};
  s = ReadProcessMemory(getpid(), At(two + page - 8), pair, sizeof(pair));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  munmap(two, page);

  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  s = ReadProcessMemory(child, At(&word), &word, sizeof(word));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
}

TEST(CrossMemoryTest, ThePidNamespaceIsKnown) { EXPECT_NE(PidNamespace(), 0u); }

}  // namespace
}  // namespace hetps
