// SignalWatcher turns SIGINT/SIGTERM into a flag every loop polls, so each role shuts down
// cleanly from its own loop instead of dying inside a signal handler; a daemon that reloads
// something on SIGHUP (the allow-list) has it call that.
//
// REQUIRES: constructed in main() before any other thread starts, so every later thread
// inherits the blocked signal mask and only the watcher's thread receives them.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

namespace hetps {

class SignalWatcher {
 public:
  // With `hangup`, SIGHUP is taken too: it runs what OnHangup set (a daemon's reload of its
  // configuration, on the watcher's thread) instead of ending the process.
  explicit SignalWatcher(bool hangup = false);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Set once SIGINT or SIGTERM arrived; live as long as the watcher.
  const std::atomic<bool>& stop() const { return stop_; }
  int signal() const { return signal_.load(); }
  // What SIGHUP does (REQUIRES: constructed with hangup); until set, SIGHUP is logged as
  // ignored.
  void OnHangup(std::function<void()> reload);

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> closing_{false};
  std::atomic<int> signal_{0};
  std::mutex mu_;
  std::function<void()> on_hangup_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace hetps
