// Process-wide log setup: one line per event, tagged with the node's role and id once known.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace hetps {

// Sets the default logger to stderr with level `level` ("debug", "info", "warn", "error").
// Returns false for an unknown level (the level is then left at info).
bool SetupLogging(const std::string& role, const std::string& level);
// Re-tags every following line with "[role id]".
void SetLogNode(const std::string& role, int id);

}  // namespace hetps
