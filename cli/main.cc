// hetps: the operator's command. `hetps --help` lists the commands; `hetps COMMAND --help`
// prints that command's usage (cli/usage.cc). Every command takes --flag=value and --flag value.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cli/ctl.h"
#include "cli/experiment.h"
#include "cli/fed.h"
#include "cli/health.h"
#include "cli/keygen.h"
#include "cli/launch_args.h"
#include "cli/launcher.h"
#include "cli/status.h"
#include "cli/usage.h"

namespace {

using Args = std::vector<std::string>;

// The path of this binary, for the commands that start `hetps launch` again.
std::string Self(const char* argv0) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  return ec ? std::string(argv0) : self;
}

// Parses with `parse` and runs with `run`; a parse error prints the command's usage only.
template <typename Parsed>
int ParseAndRun(const hetps::CommandUsage& c, hetps::StatusOr<Parsed> parsed,
                const std::function<int(const Parsed&)>& run) {
  if (!parsed.ok()) {
    std::fprintf(stderr, "hetps %s: %s\n\n%s", c.name, parsed.status().message().c_str(), c.text);
    return 2;
  }
  return run(*parsed);
}

// Prints a command's result, or its error (exit 1).
int Report(const hetps::CommandUsage& c, const hetps::StatusOr<std::string>& done, bool newline) {
  if (!done.ok()) {
    std::fprintf(stderr, "hetps %s: %s\n", c.name, done.status().ToString().c_str());
    return 1;
  }
  std::printf(newline ? "%s\n" : "%s", done.value().c_str());
  return 0;
}

// The flags of the key-using commands that take a value.
const Args kReachFlags = {"scheduler", "timeout_ms", "auth", "keys", "key"};

int Dispatch(const hetps::CommandUsage& c, const Args& raw, const char* argv0) {
  const std::string command = c.name;
  if (command == "ctl") {
    return ParseAndRun<hetps::CtlArgs>(
        c, hetps::ParseCtlArgs(hetps::JoinFlagValues(raw, kReachFlags)),
        [&](const hetps::CtlArgs& a) { return Report(c, hetps::RunCtl(a), true); });
  }
  if (command == "status") {
    return ParseAndRun<hetps::StatusArgs>(
        c, hetps::ParseStatusArgs(hetps::JoinFlagValues(raw, kReachFlags)), hetps::RunStatus);
  }
  if (command == "health") {
    Args flags = kReachFlags;
    flags.insert(flags.end(), {"role", "rank"});
    return ParseAndRun<hetps::HealthArgs>(
        c,
        hetps::ParseHealthArgs(hetps::JoinFlagValues(raw, flags), std::getenv("HETPS_SCHEDULER")),
        hetps::RunHealth);
  }
  if (command == "keygen") {
    return ParseAndRun<hetps::KeygenArgs>(
        c, hetps::ParseKeygenArgs(hetps::JoinFlagValues(raw, {"out", "add"})),
        [&](const hetps::KeygenArgs& a) { return Report(c, hetps::RunKeygen(a), false); });
  }
  if (command == "fed") {
    return ParseAndRun<hetps::FedArgs>(c, hetps::ParseFedArgs(raw), [&](const hetps::FedArgs& a) {
      return hetps::RunFed(a, Self(argv0));
    });
  }
  if (command == "experiment") {
    return ParseAndRun<hetps::ExperimentArgs>(
        c, hetps::ParseExperimentArgs(raw),
        [&](const hetps::ExperimentArgs& a) { return hetps::RunExperiment(a, Self(argv0)); });
  }
  return ParseAndRun<hetps::LaunchArgs>(c, hetps::ParseLaunchArgs(raw), hetps::Launch);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(hetps::Overview().c_str(), stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "help" || command == "--help" || command == "-h") {
    const hetps::CommandUsage* about = argc > 2 ? hetps::FindCommand(argv[2]) : nullptr;
    std::fputs(about != nullptr ? about->text : hetps::Overview().c_str(), stdout);
    return 0;
  }
  const hetps::CommandUsage* c = hetps::FindCommand(command);
  if (c == nullptr) {
    std::fprintf(stderr, "hetps: unknown command '%s'\n\n%s", command.c_str(),
                 hetps::Overview().c_str());
    return 2;
  }
  const Args args(argv + 2, argv + argc);
  if (hetps::AsksForHelp(args)) {
    std::fputs(c->text, stdout);
    return 0;
  }
  return Dispatch(*c, args, argv[0]);
}
