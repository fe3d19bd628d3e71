// Process-wide log setup: one line per event, tagged with the node's role and id once known.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace hetps {

// Sets the default logger to stdout (where containers collect logs) with level `level` ("debug",
// "info", "warn", "error") and `format`: "text" (time, level letter, [role id], message) or "json"
// (one object per line: time, level, node, msg, for log collectors). Returns why it cannot ("" when
// it can); an unknown level or format leaves info and text.
std::string SetupLogging(const std::string& role, const std::string& level,
                         const std::string& format = "text");
// Re-tags every following line with "[role id]".
void SetLogNode(const std::string& role, int id);

}  // namespace hetps
