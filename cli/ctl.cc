#include "cli/ctl.h"

#include <fmt/format.h>

#include "cli/scheduler_call.h"

namespace hetps {
namespace {

StatusOr<int64_t> NonNegative(const std::string& key, const std::string& value) {
  try {
    size_t used = 0;
    long long v = std::stoll(value, &used);
    if (used == value.size() && v >= 0) return static_cast<int64_t>(v);
  } catch (const std::exception&) {
  }
  return Status::InvalidArgument(fmt::format("{} needs an integer >= 0, got '{}'", key, value));
}

}  // namespace

StatusOr<CtlArgs> ParseCtlArgs(const std::vector<std::string>& args) {
  CtlArgs out;
  size_t i = 0;
  for (; i < args.size() && args[i].rfind("--", 0) == 0; ++i) {
    const std::string& a = args[i];
    if (a.rfind("--scheduler=", 0) == 0) {
      out.scheduler = a.substr(12);
    } else if (a.rfind("--timeout_ms=", 0) == 0) {
      auto v = NonNegative("--timeout_ms", a.substr(13));
      if (!v.ok()) return v.status();
      out.timeout_ms = static_cast<int>(*v);
    } else {
      return Status::InvalidArgument(fmt::format("unknown option '{}'", a));
    }
  }
  if (out.scheduler.empty())
    return Status::InvalidArgument("--scheduler=tcp://host:port is required");
  if (i >= args.size() || args[i] != "set") {
    return Status::InvalidArgument("expected: set consistency=SPEC");
  }
  for (++i; i < args.size(); ++i) {
    const std::string& kv = args[i];
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(fmt::format("'{}' is not key=value", kv));
    }
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key != "consistency") {
      return Status::InvalidArgument(
          fmt::format("unknown key '{}' (known: consistency; parameters go in its spec, e.g. "
                      "consistency=ssp:staleness=4)",
                      key));
    }
    if (value.empty() || value.front() == ':') {
      return Status::InvalidArgument("consistency needs a spec, e.g. ssp:staleness=4");
    }
    out.policy.set_consistency(value);
  }
  if (out.policy.consistency().empty()) {
    return Status::InvalidArgument("set needs consistency=SPEC, e.g. consistency=ssp:staleness=4");
  }
  return out;
}

Status RunCtl(const CtlArgs& args) {
  proto::Header h;
  h.set_type(proto::SET_POLICY);
  *h.mutable_policy() = args.policy;
  return CallScheduler(args.scheduler, std::move(h), args.timeout_ms).status();
}

}  // namespace hetps
