#include "cli/keygen.h"

#include <fmt/format.h>

namespace hetps {

StatusOr<KeygenArgs> ParseKeygenArgs(const std::vector<std::string>& args) {
  KeygenArgs out;
  for (const std::string& a : args) {
    if (a.starts_with("--out=")) {
      out.out = a.substr(6);
    } else if (a.starts_with("--add=")) {
      const std::string spec = a.substr(6);
      const size_t colon = spec.find(':');
      if (colon == std::string::npos) {
        return Status::InvalidArgument(fmt::format("--add={}: expected ROLE:NAME", spec));
      }
      auto role = ParseKeyRole(spec.substr(0, colon));
      if (!role.ok()) return role.status();
      out.add.push_back(CurveKey{spec.substr(colon + 1), *role, "", ""});
    } else {
      return Status::InvalidArgument(fmt::format("unknown argument '{}'", a));
    }
  }
  if (out.out.empty()) return Status::InvalidArgument("--out=DIR is required");
  return out;
}

StatusOr<std::string> RunKeygen(const KeygenArgs& args) {
  auto written = WriteKeys(args.out, args.add);
  if (!written.ok()) return written.status();
  std::string text;
  for (const std::string& f : *written) text += fmt::format("wrote {}\n", f);
  text += fmt::format(
      "Each process needs its own <name>.key and scheduler.pub; the scheduler and the servers "
      "also read allow. Run every role with --auth=curve --keys={} (and --key=NAME for a "
      "per-node pair); copy only the .key files a host needs.\n",
      args.out);
  return text;
}

}  // namespace hetps
