#include "common/daemon.h"

#include <gflags/gflags.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <string>

#include "common/env_flags.h"
#include "common/logging.h"

DEFINE_string(log_level, "info", "debug, info, warn, error");
DEFINE_string(log_format, "text",
              "text (time, level, [role id], message) or json (one object per line: time, "
              "level, node, msg), for log collectors");

namespace hetps {

bool StartDaemon(const char* role, const char* usage, int* argc, char*** argv) {
  gflags::SetUsageMessage(usage);
  const EnvironmentFlags env = ApplyEnvironmentFlags(environ);
  gflags::ParseCommandLineFlags(argc, argv, true);
  const std::string problem = SetupLogging(role, FLAGS_log_level, FLAGS_log_format);
  if (!problem.empty()) {
    spdlog::error("{}", problem);
    return false;
  }
  if (!env.status.ok()) {
    spdlog::error("{}", env.status.message());
    return false;
  }
  for (const std::string& name : env.unknown) {
    spdlog::warn("{} is set but hetps-{} has no such flag; ignored", name, role);
  }
  if (!env.applied.empty()) {
    std::string names;
    for (const std::string& name : env.applied) names += (names.empty() ? "" : ", ") + name;
    spdlog::debug("flags from the environment: {}", names);
  }
  return true;
}

}  // namespace hetps
