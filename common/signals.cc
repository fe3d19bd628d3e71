#include "common/signals.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <ctime>

namespace hetps {
namespace {

sigset_t Signals(bool hangup) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (hangup) sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

SignalWatcher::SignalWatcher(bool hangup) {
  sigset_t set = Signals(hangup);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  thread_ = std::thread([this, set] {
    const timespec tick{0, 100'000'000};
    while (!closing_.load()) {
      int sig = sigtimedwait(&set, nullptr, &tick);
      if (sig == SIGHUP) {
        std::function<void()> reload;
        {
          std::lock_guard lock(mu_);
          reload = on_hangup_;
        }
        if (reload) {
          reload();
        } else {
          spdlog::info("received SIGHUP: nothing to reload");
        }
      } else if (sig > 0) {
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

void SignalWatcher::OnHangup(std::function<void()> reload) {
  std::lock_guard lock(mu_);
  on_hangup_ = std::move(reload);
}

}  // namespace hetps
