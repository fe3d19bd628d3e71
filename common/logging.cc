#include "common/logging.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace hetps {
namespace {

void SetTag(const std::string& tag) {
  spdlog::set_pattern(fmt::format("%H:%M:%S.%e %^%L%$ [{}] %v", tag));
}

}  // namespace

bool SetupLogging(const std::string& role, const std::string& level) {
  auto logger = spdlog::stderr_color_mt("hetps");
  spdlog::set_default_logger(logger);
  SetTag(role);
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  bool known = lvl != spdlog::level::off || level == "off";
  spdlog::set_level(known ? lvl : spdlog::level::info);
  spdlog::flush_on(spdlog::level::info);
  return known;
}

void SetLogNode(const std::string& role, int id) { SetTag(fmt::format("{} {}", role, id)); }

}  // namespace hetps
