// Flags from the environment, the way containers pass settings: every flag a daemon defines may
// also be given as HETPS_<NAME>, the flag's name in upper case (HETPS_SCHEDULER,
// HETPS_NUM_WORKERS, HETPS_DATA_DIR, ...). The command line wins over the environment.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct EnvironmentFlags {
  Status status;                     // the first value a flag refused, naming the variable
  std::vector<std::string> applied;  // "HETPS_X" for each flag taken from the environment
  std::vector<std::string> unknown;  // HETPS_* variables that name no flag of this program
};

// Sets every flag whose HETPS_<NAME> is in `environment` ("NAME=value" entries, e.g. environ).
// Call before gflags::ParseCommandLineFlags, so that the command line overrides. Variables of
// the project's scripts and tests that are no flags (`ignored`) are not reported as unknown.
EnvironmentFlags ApplyEnvironmentFlags(const char* const* environment,
                                       const std::vector<std::string>& ignored = {
                                           "HETPS_BUILD_TYPE", "HETPS_CRASH_AT", "HETPS_HOST"});

}  // namespace hetps
