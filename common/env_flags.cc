#include "common/env_flags.h"

#include <gflags/gflags.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace hetps {

EnvironmentFlags ApplyEnvironmentFlags(const char* const* environment,
                                       const std::vector<std::string>& ignored) {
  EnvironmentFlags out;
  // This program's own flags (gflags' built-in ones, such as --flagfile, are left out).
  std::map<std::string, std::string> flags;  // HETPS_NAME -> name
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  for (const gflags::CommandLineFlagInfo& f : all) {
    if (f.filename.find("gflags") != std::string::npos) continue;
    std::string env = "HETPS_" + f.name;
    std::transform(env.begin(), env.end(), env.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    flags[env] = f.name;
  }
  for (const char* const* e = environment; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || entry.rfind("HETPS_", 0) != 0) continue;
    const std::string name = entry.substr(0, eq), value = entry.substr(eq + 1);
    auto flag = flags.find(name);
    if (flag == flags.end()) {
      if (std::find(ignored.begin(), ignored.end(), name) == ignored.end()) {
        out.unknown.push_back(name);
      }
      continue;
    }
    if (gflags::SetCommandLineOption(flag->second.c_str(), value.c_str()).empty()) {
      if (out.status.ok()) {
        out.status = Status::InvalidArgument(name + "='" + value + "' is not a valid value for --" +
                                             flag->second);
      }
      continue;
    }
    out.applied.push_back(name);
  }
  return out;
}

}  // namespace hetps
