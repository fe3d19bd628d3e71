// CmaPeers: the handshake with a child process standing for a co-located worker (a claim is
// challenged and proven before anything is written), copies into and out of it, and
// revocation (nothing is touched afterwards).
#include "server/cma_peers.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>

#include "common/cross_memory.h"

namespace hetps {
namespace {

uint64_t At(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// A child with the same address space layout as this process (fork): on request it stores a
// word at an address of its own memory, and stays until killed.
class Worker {
 public:
  Worker() {
    EXPECT_EQ(pipe(to_.data()), 0);
    EXPECT_EQ(pipe(from_.data()), 0);
    pid_ = fork();
    if (pid_ == 0) Serve();
  }
  ~Worker() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    for (int fd : {to_[0], to_[1], from_[0], from_[1]}) close(fd);
  }
  pid_t pid() const { return pid_; }
  // Makes the child store `value` at `address` (in its copy of this memory).
  void Store(uint64_t* address, uint64_t value) {
    const std::array<uint64_t, 2> request = {At(address), value};
    ASSERT_EQ(write(to_[1], request.data(), sizeof(request)), ssize_t{sizeof(request)});
    char done = 0;
    ASSERT_EQ(read(from_[0], &done, 1), 1);
  }

 private:
  [[noreturn]] void Serve() {  // async-signal-safe calls only
    std::array<uint64_t, 2> request{};
    while (read(to_[0], request.data(), sizeof(request)) == ssize_t{sizeof(request)}) {
      *reinterpret_cast<uint64_t*>(request[0]) = request[1];
      const char done = 1;
      if (write(from_[1], &done, 1) != 1) break;
    }
    _exit(0);
  }
  std::array<int, 2> to_{}, from_{};
  pid_t pid_ = -1;
};

TEST(CmaPeersTest, AClaimIsProvenBeforeAnythingIsWritten) {
  uint64_t probe[2] = {0, 0};
  Worker worker;
  CmaPeers peers;
  // Not another process, not this namespace, no challenge, a wrong probe.
  EXPECT_EQ(peers.Challenge(1, getpid(), PidNamespace(), At(probe)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(peers.Challenge(1, worker.pid(), PidNamespace() + 1, At(probe)).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(peers.Confirm(1, 42).code(), StatusCode::kFailedPrecondition);
  auto challenge = peers.Challenge(1, worker.pid(), PidNamespace(), At(probe));
  ASSERT_TRUE(challenge.ok()) << challenge.status().ToString();
  worker.Store(&probe[0], *challenge);
  EXPECT_EQ(peers.Confirm(1, *challenge + 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(peers.Attached(1));
  // The probe in place but the claim spent: a new challenge is needed.
  EXPECT_EQ(peers.Confirm(1, *challenge).code(), StatusCode::kFailedPrecondition);
  // A challenge not put where the worker said: this process's memory, not the child's, holds it.
  challenge = peers.Challenge(1, worker.pid(), PidNamespace(), At(probe));
  ASSERT_TRUE(challenge.ok());
  probe[0] = *challenge;
  EXPECT_EQ(peers.Confirm(1, *challenge).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(peers.Attached(1));
  // Proven: the complement is written after the probe, in the child.
  challenge = peers.Challenge(1, worker.pid(), PidNamespace(), At(probe));
  ASSERT_TRUE(challenge.ok());
  worker.Store(&probe[0], *challenge);
  ASSERT_TRUE(peers.Confirm(1, *challenge).ok());
  EXPECT_TRUE(peers.Attached(1));
  uint64_t seen[2] = {0, 0};
  ASSERT_TRUE(ReadProcessMemory(worker.pid(), At(probe), seen, sizeof(seen)).ok());
  EXPECT_EQ(seen[0], *challenge);
  EXPECT_EQ(seen[1], ~*challenge);
  EXPECT_EQ(probe[1], 0u) << "this process's copy is not the worker's";
}

TEST(CmaPeersTest, CopiesGoToTheAttachedWorkerUntilRevoked) {
  uint64_t probe[2] = {0, 0};
  std::array<float, 1024> array{};
  Worker worker;
  CmaPeers peers;
  std::array<float, 1024> values;
  values.fill(2.5f);
  EXPECT_EQ(peers.Write(3, At(array.data()), values.data(), sizeof(values)).code(),
            StatusCode::kFailedPrecondition)
      << "not attached";
  auto challenge = peers.Challenge(3, worker.pid(), PidNamespace(), At(probe));
  ASSERT_TRUE(challenge.ok());
  worker.Store(&probe[0], *challenge);
  ASSERT_TRUE(peers.Confirm(3, *challenge).ok());
  ASSERT_TRUE(peers.Write(3, At(array.data()), values.data(), sizeof(values)).ok());
  std::array<float, 1024> back{};
  ASSERT_TRUE(peers.Read(3, At(array.data()), back.data(), sizeof(back)).ok());
  EXPECT_EQ(back, values);
  EXPECT_EQ(array[0], 0.0f) << "this process's copy is not the worker's";
  EXPECT_EQ(peers.Read(3, 64, back.data(), sizeof(back)).code(), StatusCode::kInvalidArgument);
  // Another worker id is not attached through this one.
  EXPECT_EQ(peers.Read(4, At(array.data()), back.data(), sizeof(back)).code(),
            StatusCode::kFailedPrecondition);
  peers.Revoke(3);
  EXPECT_FALSE(peers.Attached(3));
  EXPECT_EQ(peers.Write(3, At(array.data()), values.data(), sizeof(values)).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(peers.Read(3, At(array.data()), back.data(), sizeof(back)).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace hetps
