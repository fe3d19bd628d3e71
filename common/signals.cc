#include "common/signals.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <ctime>

namespace hetps {
namespace {

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

SignalWatcher::SignalWatcher() {
  sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this, set] {
    const timespec tick{0, 100'000'000};
    while (!closing_.load()) {
      int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig > 0) {
        spdlog::info("received {}, shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
        signal_ = sig;
        stop_ = true;
      }
    }
  });
}

SignalWatcher::~SignalWatcher() {
  closing_ = true;
  thread_.join();
}

}  // namespace hetps
