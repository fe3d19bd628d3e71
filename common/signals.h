// SignalWatcher turns SIGINT/SIGTERM into a flag every loop polls, so each role shuts down
// cleanly from its own loop instead of dying inside a signal handler.
//
// REQUIRES: constructed in main() before any other thread starts, so every later thread
// inherits the blocked signal mask and only the watcher's thread receives them.
#pragma once

#include <atomic>
#include <thread>

namespace hetps {

class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Set once SIGINT or SIGTERM arrived; live as long as the watcher.
  const std::atomic<bool>& stop() const { return stop_; }
  int signal() const { return signal_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> closing_{false};
  std::atomic<int> signal_{0};
  std::thread thread_;
};

}  // namespace hetps
