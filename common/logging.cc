#include "common/logging.h"

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace hetps {
namespace {

bool json = false;

// Appends `text` escaped for a JSON string (bytes that are not UTF-8 become U+FFFD, so every
// line stays valid JSON).
void AppendEscaped(std::string_view text, spdlog::memory_buf_t& dest) {
  const std::string quoted = nlohmann::json(std::string(text))
                                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  dest.append(std::string_view(quoted).substr(1, quoted.size() - 2));
}

// %* in a JSON pattern: the message, escaped.
class EscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessage>();
  }
};

void SetTag(const std::string& tag) {
  if (!json) {
    spdlog::set_pattern(fmt::format("%H:%M:%S.%e %^%L%$ [{}] %v", tag));
    return;
  }
  spdlog::memory_buf_t node;
  AppendEscaped(tag, node);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*').set_pattern(
      fmt::format(R"({{"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","node":"{}","msg":"%*"}})",
                  std::string_view(node.data(), node.size())));
  spdlog::set_formatter(std::move(formatter));
}

}  // namespace

std::string SetupLogging(const std::string& role, const std::string& level,
                         const std::string& format) {
  auto logger = spdlog::stdout_color_mt("hetps");
  spdlog::set_default_logger(logger);
  json = format == "json";
  SetTag(role);
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  const bool known = lvl != spdlog::level::off || level == "off";
  spdlog::set_level(known ? lvl : spdlog::level::info);
  spdlog::flush_on(spdlog::level::info);
  if (!known) return "unknown --log_level '" + level + "' (debug, info, warn, error)";
  if (format != "text" && format != "json") {
    return "unknown --log_format '" + format + "' (text or json)";
  }
  return "";
}

void SetLogNode(const std::string& role, int id) { SetTag(fmt::format("{} {}", role, id)); }

}  // namespace hetps
