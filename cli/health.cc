#include "cli/health.h"

#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/launch_args.h"
#include "cli/status.h"

namespace hetps {

StatusOr<HealthArgs> ParseHealthArgs(const std::vector<std::string>& args,
                                     const char* scheduler_env) {
  HealthArgs out;
  if (scheduler_env != nullptr) out.scheduler = scheduler_env;
  for (const std::string& a : args) {
    const auto [name, value, has_value] = SplitArg(a);
    if (out.auth.TakeArg(a)) continue;
    if (name == "--scheduler" && !value.empty()) {
      out.scheduler = value;
    } else if (name == "--role" && (value == "server" || value == "worker")) {
      out.role = value;
    } else if (name == "--rank" || name == "--timeout_ms") {
      auto v = IntArg(name.substr(2), value, name == "--rank" ? 0 : 1);
      if (!v.ok()) return v.status();
      (name == "--rank" ? out.rank : out.timeout_ms) = *v;
    } else {
      return Status::InvalidArgument(fmt::format("unknown argument '{}'", a));
    }
  }
  if (Status s = out.auth.UseRun(out.scheduler); !s.ok()) return s;
  if (out.scheduler.empty()) {
    return Status::InvalidArgument(
        "--scheduler=tcp://host:port (or --run_dir=RUN, or HETPS_SCHEDULER) is required");
  }
  if (out.role.empty() != (out.rank < 0)) {
    return Status::InvalidArgument("--role=server|worker and --rank=R go together");
  }
  return out;
}

Status CheckHealth(const HealthArgs& args, const std::string& status_json) {
  const auto doc = nlohmann::json::parse(status_json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::Malformed("the scheduler's status is not a JSON object");
  }
  if (args.role.empty()) return Status();
  const auto& nodes = doc.value(args.role + "s", nlohmann::json::array());
  if (!nodes.is_array())
    return Status::Malformed("the scheduler's status has no " + args.role + "s");
  for (const auto& node : nodes) {
    if (!node.is_object() || node.value("rank", -1) != args.rank) continue;
    const std::string state = node.value("state", "");
    if (state == "alive") return Status();
    return Status::Unavailable(fmt::format("{} {} is {}", args.role, args.rank, state));
  }
  return Status::NotFound(
      fmt::format("the scheduler knows no {} of rank {}", args.role, args.rank));
}

int RunHealth(const HealthArgs& args) {
  auto status = FetchStatus(args.scheduler, args.auth, args.timeout_ms);
  Status s = status.ok() ? CheckHealth(args, *status) : status.status();
  const std::string what =
      args.role.empty() ? "the scheduler at " + args.scheduler
                        : fmt::format("{} {} (scheduler {})", args.role, args.rank, args.scheduler);
  if (!s.ok()) {
    std::printf("unhealthy: %s: %s\n", what.c_str(), s.message().c_str());
    return 1;
  }
  std::printf("healthy: %s%s\n", what.c_str(), args.role.empty() ? " answers" : " is alive");
  return 0;
}

}  // namespace hetps
