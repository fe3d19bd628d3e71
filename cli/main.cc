// hetps: the operator's command. Today: `hetps launch`.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/launch_args.h"
#include "cli/launcher.h"

namespace {

constexpr char kUsage[] =
    "usage: hetps launch --servers S --workers W [--flagfile F] [--bin_dir D] [--grace_ms G]\n"
    "                    [--any_role_flag=value ...]\n"
    "\n"
    "  launch   run a whole cluster (scheduler, S servers, W workers) on 127.0.0.1 on free\n"
    "           ports. Extra flags go to every role that defines them (see each binary's\n"
    "           --help), e.g. --optimizer=adam --lr=0.001 --iterations=100.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "help" || std::string(argv[1]) == "--help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command != "launch") {
    std::fprintf(stderr, "hetps: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  }
  auto args = hetps::ParseLaunchArgs(std::vector<std::string>(argv + 2, argv + argc));
  if (!args.ok()) {
    std::fprintf(stderr, "hetps launch: %s\n", args.status().message().c_str());
    return 2;
  }
  return hetps::Launch(*args);
}
