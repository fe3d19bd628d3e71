#include "worker/shm_channel.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <vector>

namespace hetps {
namespace {

// The addresses of this network namespace's interfaces, as text (inet_ntop).
std::vector<std::string> InterfaceAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                sizeof(text));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, text,
                sizeof(text));
    } else {
      continue;
    }
    out.emplace_back(text);
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

bool IsLocalEndpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string host = endpoint.substr(6);
  const size_t colon = host.rfind(':');
  if (colon == std::string::npos) return false;
  host.resize(colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "*") return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &resolved) != 0) return false;
  const std::vector<std::string> local = InterfaceAddresses();
  bool found = false;
  for (addrinfo* r = resolved; r != nullptr && !found; r = r->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (r->ai_family == AF_INET) {
      const in_addr& a = reinterpret_cast<sockaddr_in*>(r->ai_addr)->sin_addr;
      if ((ntohl(a.s_addr) >> 24) == 127) found = true;  // all of 127/8 is loopback
      inet_ntop(AF_INET, &a, text, sizeof(text));
    } else if (r->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(r->ai_addr)->sin6_addr, text,
                sizeof(text));
    }
    for (const std::string& l : local) found = found || l == text;
  }
  freeaddrinfo(resolved);
  return found;
}

StatusOr<std::unique_ptr<ShmChannel>> ShmChannel::Create(uint64_t tag, int rank, size_t bytes) {
  auto segment = ShmSegment::Create(fmt::format("/hetps-{}-{:x}-s{}", getpid(), tag, rank), bytes);
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<ShmChannel>(new ShmChannel(std::move(*segment)));
}

ShmChannel::ShmChannel(std::unique_ptr<ShmSegment> segment) : segment_(std::move(segment)) {
  free_[0] = static_cast<int64_t>(segment_->size());
}

std::optional<int64_t> ShmChannel::Allocate(int64_t bytes) {
  constexpr int64_t kAlign = 64;
  const int64_t want = (bytes + kAlign - 1) / kAlign * kAlign;
  if (want <= 0) return std::nullopt;
  for (auto it = free_.begin(); it != free_.end(); ++it) {  // first fit
    if (it->second < want) continue;
    const int64_t offset = it->first, left = it->second - want;
    if (static_cast<size_t>(offset + want) > segment_->reserved()) {
      // Memory behind the segment is reserved as the slots in use first reach it, in steps of
      // kReserveStep, so a worker whose payloads are small commits little.
      constexpr int64_t kReserveStep = int64_t{4} << 20;
      const int64_t upto = (offset + want + kReserveStep - 1) / kReserveStep * kReserveStep;
      if (!segment_->Reserve(static_cast<size_t>(upto)).ok() &&
          !segment_->Reserve(static_cast<size_t>(offset + want)).ok()) {
        return std::nullopt;  // /dev/shm is full: this request goes over TCP
      }
    }
    free_.erase(it);
    if (left > 0) free_[offset + want] = left;
    used_[offset] = want;
    allocated_bytes_ += want;
    return offset;
  }
  return std::nullopt;
}

void ShmChannel::Free(int64_t offset) {
  auto used = used_.find(offset);
  if (used == used_.end()) return;
  int64_t start = offset, bytes = used->second;
  allocated_bytes_ -= bytes;
  used_.erase(used);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + bytes == next->first) {  // merge with the one after
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {  // and the one before
      prev->second += bytes;
      return;
    }
  }
  free_[start] = bytes;
}

}  // namespace hetps
