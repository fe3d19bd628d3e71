// ConnectionGuard: at most `per_address` connections at once from one peer IP address to a
// listening ZeroMQ socket. ZeroMQ accepts every connection and has no such limit, and each one
// holds a descriptor and buffers until its handshake ends (30 s for one that stalls), so a
// single host could otherwise take every descriptor the process may open and keep real nodes
// out. The guard follows the socket's monitor events (accepted, disconnected) on a thread of
// its own and shuts down a connection beyond the limit (shutdown(2) on its descriptor: ZeroMQ
// sees it end, as when a peer hangs up, and closes it itself). It checks the descriptor's peer
// (address and port) again just before, so a descriptor reused by a newer connection is never
// cut for an older one. Refusals are logged with the address (the first 20, then every 1000th).
// Only TCP peers are counted (ipc peers are local users the file's permissions admit). ZeroMQ
// drops no monitor event (its sender waits while the reader lags), so the counts stay exact.
//
// Thread-safety: construct and destroy on the thread that owns `socket` (the monitor is set up
// and taken down on it); counts may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <zmq.hpp>

namespace hetps {

class ConnectionGuard {
 public:
  // `per_address` <= 0: no limit (nothing is watched). `name` names the socket in the log.
  // Call before the socket binds, so no connection is accepted unseen.
  ConnectionGuard(zmq::socket_t& socket, int per_address, std::string name);
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  int64_t refused() const { return refused_.load(); }

 private:
  class Monitor;
  void Run();

  std::unique_ptr<Monitor> monitor_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

}  // namespace hetps
