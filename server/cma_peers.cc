#include "server/cma_peers.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "common/cross_memory.h"

namespace hetps {

StatusOr<uint64_t> CmaPeers::Challenge(int32_t worker, pid_t pid, uint64_t pid_namespace,
                                       uint64_t address) {
  if (pid <= 0 || pid == getpid()) {
    return Status::InvalidArgument(fmt::format("process id {}", pid));
  }
  if (pid_namespace == 0 || pid_namespace != PidNamespace()) {
    return Status::FailedPrecondition("the worker is in another pid namespace");
  }
  struct stat st {};
  if (stat(fmt::format("/proc/{}", pid).c_str(), &st) != 0 || st.st_uid != geteuid()) {
    return Status::FailedPrecondition(
        fmt::format("process {} does not exist or belongs to another user", pid));
  }
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t probe = 0;
  while (probe == 0) probe = rng();
  std::lock_guard<std::mutex> lock(mu_);
  if (claims_.size() >= 4096) claims_.clear();  // bounded: claims never confirmed
  claims_[worker] = {pid, address, probe};
  return probe;
}

Status CmaPeers::Confirm(int32_t worker, uint64_t probe) {
  Claim claim;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = claims_.find(worker);
    if (it == claims_.end()) return Status::FailedPrecondition("no challenge to answer");
    claim = it->second;
    claims_.erase(it);
  }
  if (probe != claim.probe) return Status::FailedPrecondition("the probe is not the one given");
  uint64_t seen = 0;
  if (Status s = ReadProcessMemory(claim.pid, claim.address, &seen, sizeof(seen)); !s.ok()) {
    return s;
  }
  if (seen != claim.probe) {
    return Status::FailedPrecondition(fmt::format(
        "process {} does not hold the probe where the worker said: not the worker", claim.pid));
  }
  const uint64_t answer = ~claim.probe;
  if (Status s =
          WriteProcessMemory(claim.pid, claim.address + sizeof(answer), &answer, sizeof(answer));
      !s.ok()) {
    return s;
  }
  auto peer = std::make_shared<Peer>();
  peer->pid = claim.pid;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto old = peers_.find(worker); old != peers_.end()) {
    std::unique_lock<std::shared_mutex> revoking(old->second->mu);
    old->second->revoked = true;
  }
  peers_[worker] = std::move(peer);
  return Status();
}

void CmaPeers::Revoke(int32_t worker) {
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    claims_.erase(worker);
    auto it = peers_.find(worker);
    if (it == peers_.end()) return;
    peer = std::move(it->second);
    peers_.erase(it);
  }
  std::unique_lock<std::shared_mutex> revoking(peer->mu);  // waits for copies in progress
  peer->revoked = true;
}

bool CmaPeers::Attached(int32_t worker) const { return Find(worker) != nullptr; }

std::shared_ptr<CmaPeers::Peer> CmaPeers::Find(int32_t worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(worker);
  return it == peers_.end() ? nullptr : it->second;
}

template <typename Copy>
Status CmaPeers::WithPeer(int32_t worker, Copy copy) const {
  std::shared_ptr<Peer> peer = Find(worker);
  if (peer == nullptr) {
    return Status::FailedPrecondition(
        fmt::format("worker {} has no cross memory attach here (or revoked it)", worker));
  }
  std::shared_lock<std::shared_mutex> copying(peer->mu);
  if (peer->revoked) {
    return Status::FailedPrecondition(fmt::format("worker {} revoked cross memory attach", worker));
  }
  return copy(peer->pid);
}

Status CmaPeers::Read(int32_t worker, uint64_t address, void* dst, size_t bytes) const {
  return WithPeer(worker, [&](pid_t pid) { return ReadProcessMemory(pid, address, dst, bytes); });
}

Status CmaPeers::Write(int32_t worker, uint64_t address, const void* src, size_t bytes) const {
  return WithPeer(worker, [&](pid_t pid) { return WriteProcessMemory(pid, address, src, bytes); });
}

}  // namespace hetps
