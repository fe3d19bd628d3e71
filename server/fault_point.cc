#include "server/fault_point.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace hetps {

std::atomic<FaultHook> g_fault_hook{nullptr};

namespace {

std::string crash_point;
std::atomic<long> crash_countdown{0};

void CrashHook(const char* point) {
  if (crash_point != point) return;
  if (crash_countdown.fetch_sub(1) == 1) {
    static const char message[] = "hetps-server: crash point reached (HETPS_CRASH_AT)\n";
    (void)!write(2, message, sizeof(message) - 1);
    kill(getpid(), SIGKILL);
  }
}

}  // namespace

bool CrashAt(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  char* end = nullptr;
  const long n = std::strtol(spec.c_str() + colon + 1, &end, 10);
  if (end == spec.c_str() + colon + 1 || *end != '\0' || n < 1) return false;
  crash_point = spec.substr(0, colon);
  crash_countdown = n;
  g_fault_hook = CrashHook;
  return true;
}

}  // namespace hetps
