#include "cli/run_keys.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "common/auth.h"

namespace hetps {

namespace fs = std::filesystem;

std::string RunKeysDir(const std::string& run_dir) { return run_dir + "/keys"; }
std::string RunEndpointFile(const std::string& run_dir) { return run_dir + "/scheduler.endpoint"; }

bool AsksInsecure(const std::vector<std::string>& flags) {
  for (const std::string& f : flags) {
    if (f == "--insecure" || f == "--insecure=true" || f == "--insecure=1") return true;
  }
  return false;
}

namespace {

// Whether the run says how it authenticates: --auth on a role, HETPS_AUTH, or --insecure.
bool ChoseAuthentication(const std::map<std::string, std::vector<std::string>>& routed) {
  if (const char* v = std::getenv("HETPS_AUTH"); v != nullptr && *v != '\0') return true;
  if (const char* v = std::getenv("HETPS_INSECURE");
      v != nullptr && (std::string(v) == "true" || std::string(v) == "1")) {
    return true;
  }
  for (const auto& [role, flags] : routed) {
    if (!LastFlagValue(flags, "auth").empty() || AsksInsecure(flags)) return true;
  }
  return false;
}

}  // namespace

StatusOr<std::string> SecureLocalRun(const LaunchArgs& args, const std::string& run_dir,
                                     std::map<std::string, std::vector<std::string>>& routed) {
  if (!args.hosts.empty() || ChoseAuthentication(routed)) return std::string();
  const std::string keys = RunKeysDir(run_dir);
  std::string said;
  std::error_code ec;
  if (!fs::exists(keys + "/scheduler.pub", ec)) {
    auto written = WriteKeys(keys, {});
    if (!written.ok()) {
      return Status(written.status().code(),
                    fmt::format("cannot make the run's keys: {}", written.status().message()));
    }
    said = fmt::format(
        "keys for this run in {}: every role authenticates with them (--insecure runs without)",
        keys);
  }
  for (const char* role : {"scheduler", "server", "worker", "aggregator"}) {
    std::vector<std::string>& flags = routed[role];
    flags.insert(flags.begin(), {"--auth=curve", "--keys=" + keys});
  }
  return said;
}

}  // namespace hetps
