// `hetps experiment`'s arguments: the experiment file and the command line parsed into
// ExperimentArgs (every arm and option checked before anything runs), and the resolved
// experiment written back as one flag file.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "cli/experiment.h"
#include "cli/launch_args.h"
#include "cli/run_series.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

constexpr char kDefaultSetting[] = "default";
// Opens the options of a resolved experiment file (ExperimentFlagFile), after its description.
constexpr char kResolvedLine[] =
    "# As resolved by hetps experiment run: its options, arms and the flags of every run.";

StatusOr<ExperimentArm> ParseArm(const std::string& option, const std::string& value) {
  const size_t colon = value.find(':');
  ExperimentArm arm;
  arm.name = Trim(value.substr(0, colon));
  if (colon == std::string::npos || arm.name.empty()) {
    return Status::InvalidArgument(fmt::format(
        "--{}={}: give NAME: --flag=value ..., e.g. --{}=ssp3: --consistency=ssp:staleness=3",
        option, value, option));
  }
  if (DirName(arm.name) != arm.name) {
    return Status::InvalidArgument(fmt::format(
        "--{}: the name '{}' names a folder: letters, digits, '-' and '.' only", option, arm.name));
  }
  std::istringstream in(value.substr(colon + 1));
  for (std::string word; in >> word;) {
    if (FlagName(word).empty()) {
      return Status::InvalidArgument(
          fmt::format("--{}={}: '{}' is not a flag (--name=value)", option, arm.name, word));
    }
    if (FlagName(word) == "servers" || FlagName(word) == "workers") {
      auto n = IntArg(FlagName(word), SplitArg(word).value, 1);
      if (!n.ok()) {
        return Status::InvalidArgument(
            fmt::format("--{}={}: {}", option, arm.name, n.status().message()));
      }
    }
    arm.flags.push_back(word);
  }
  return arm;
}

// --sweep_lr=R1,R2,...: at least two distinct rates > 0.
Status SetSweepRates(ExperimentArgs& a, const std::string& value) {
  a.sweep_lr.clear();
  std::istringstream in(value);
  for (std::string rate; std::getline(in, rate, ',');) {
    rate = Trim(rate);
    char* end = nullptr;
    const double v = std::strtod(rate.c_str(), &end);
    if (rate.empty() || *end != '\0' || !(v > 0 && std::isfinite(v))) {
      return Status::InvalidArgument(fmt::format(
          "--sweep_lr: '{}' is not a learning rate > 0 (give e.g. --sweep_lr=0.02,0.05,0.1)",
          rate));
    }
    if (std::find(a.sweep_lr.begin(), a.sweep_lr.end(), rate) != a.sweep_lr.end()) {
      return Status::InvalidArgument(fmt::format("--sweep_lr: {} is given twice", rate));
    }
    a.sweep_lr.push_back(rate);
  }
  if (a.sweep_lr.size() < 2 && !value.empty()) {
    return Status::InvalidArgument("--sweep_lr: a sweep needs at least two rates");
  }
  return Status();
}

// --algorithm=NAME: ... or --setting=NAME: ..., a name given once.
Status AddArm(ExperimentArgs& a, const std::string& option, const std::string& value) {
  auto arm = ParseArm(option, value);
  if (!arm.ok()) return arm.status();
  auto& arms = option == "algorithm" ? a.algorithms : a.settings;
  for (const ExperimentArm& other : arms) {
    if (other.name == arm->name) {
      return Status::InvalidArgument(fmt::format("--{}={} is given twice", option, arm->name));
    }
  }
  arms.push_back(std::move(*arm));
  return Status();
}

// One of the experiment's own options: sets it and returns true; false for a role flag.
StatusOr<bool> SetOwn(ExperimentArgs& a, const std::string& arg) {
  const ArgParts parts = SplitArg(arg);
  const std::string name = FlagName(arg);
  const std::string& value = parts.value;
  struct Int {
    const char* name;
    int* field;
    int min;
  };
  for (const Int& o :
       {Int{"servers", &a.servers, 1}, Int{"workers", &a.workers, 1}, Int{"repeats", &a.repeats, 1},
        Int{"grace_ms", &a.grace_ms, 0}, Int{"sweep_iterations", &a.sweep_iterations, 1},
        Int{"sweep_repeats", &a.sweep_repeats, 1}, Int{"validation", &a.validation, 1}}) {
    if (name != o.name) continue;
    auto v = IntArg(name, value, o.min);
    if (!v.ok()) return v.status();
    *o.field = *v;
    return true;
  }
  if (name == "target") {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(v >= 0 && v <= 1)) {
      return Status::InvalidArgument(
          fmt::format("--target is a test accuracy in [0, 1], got '{}'", value));
    }
    a.target = v;
    return true;
  }
  if (name == "sweep_lr") {
    if (Status st = SetSweepRates(a, value); !st.ok()) return st;
    return true;
  }
  if (name == "algorithm" || name == "setting") {
    if (Status st = AddArm(a, name, value); !st.ok()) return st;
    return true;
  }
  if (name == "run_dir" || name == "bin_dir") {
    if (value.empty()) return Status::InvalidArgument("--" + name + " needs a folder");
    (name == "run_dir" ? a.run_dir : a.bin_dir) = value;
    return true;
  }
  if (name == "name") {
    if (value.empty() || DirName(value) != value) {
      return Status::InvalidArgument("--name: letters, digits, '-' and '.' only");
    }
    a.name = value;
    return true;
  }
  if (name == "flagfile") {
    return Status::InvalidArgument("give the experiment file as `hetps experiment run FILE`");
  }
  return false;
}

// The leading comment of an experiment file: its first '#' lines, '#' and one blank taken off.
std::string LeadingComment(const std::string& path) {
  std::ifstream in(path);
  std::string about;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '#' || line == kResolvedLine) break;
    line = line.substr(1);
    if (!line.empty() && line[0] == ' ') line = line.substr(1);
    about += (about.empty() ? "" : "\n") + line;
  }
  return about;
}

// What the parsed experiment must hold together: no arm sets what the experiment sets per
// run, the sweep's options only with a sweep, and a sweep only where every run has an
// --optimizer whose lr it can set.
Status CheckArms(const ExperimentArgs& a, const std::set<std::string>& own_given) {
  if (const std::string seed = LastFlagValue(a.flags, "data_seed"); !seed.empty()) {
    if (auto s = SeedArg("data_seed", seed); !s.ok()) return s.status();
  }
  for (const auto* group : {&a.settings, &a.algorithms}) {
    for (const ExperimentArm& arm : *group) {
      for (const std::string& f : arm.flags) {
        if (FlagName(f) == "data_seed" || FlagName(f) == "run_dir" || FlagName(f) == "validation") {
          return Status::InvalidArgument(
              fmt::format("{}: {} sets --{}, which the experiment sets per run", a.file, arm.name,
                          FlagName(f)));
        }
      }
    }
  }
  if (a.sweep_lr.empty()) {
    for (const char* option : {"validation", "sweep_iterations", "sweep_repeats"}) {
      if (own_given.contains(option)) {
        return Status::InvalidArgument(fmt::format(
            "--{} belongs to a learning-rate sweep: give --sweep_lr too (the grid's runs are "
            "measured on the test set)",
            option));
      }
    }
  } else {
    for (const ExperimentRun& run : ExpandExperiment(a, "")) {
      if (LastFlagValue(run.flags, "optimizer").empty()) {
        return Status::InvalidArgument(fmt::format(
            "{}: --sweep_lr sets the lr of each run's --optimizer, and {}/{} has none (give "
            "e.g. --optimizer=sgd:lr=0.05)",
            a.file, run.setting, run.algorithm));
      }
    }
  }
  return Status();
}

}  // namespace

StatusOr<ExperimentArgs> ParseExperimentArgs(const std::vector<std::string>& args) {
  if (args.size() < 2 || (args[0] != "run" && args[0] != "report")) {
    return Status::InvalidArgument(
        "expected `run FILE [--option=value ...]` or `report DIR` (an experiment's folder)");
  }
  ExperimentArgs a;
  a.report_only = args[0] == "report";
  if (a.report_only) {
    a.run_dir = args[1];
    a.file = args[1] + "/experiment.flags";
  } else {
    a.file = args[1];
  }
  std::vector<std::string> lines;
  if (Status s = ReadFlagfile(a.file, lines); !s.ok()) return s;
  a.name = DirName(fs::path(a.file).stem().string());
  a.about = LeadingComment(a.file);
  std::set<std::string> own_given;  // the experiment's own options, by name
  for (const std::string& line : lines) {
    auto own = SetOwn(a, line);
    if (!own.ok()) return Status::InvalidArgument(a.file + ": " + own.status().message());
    if (!*own) a.flags.push_back(line);
    if (*own) own_given.insert(FlagName(line));
  }
  // The command line's options replace the file's (its arms add to them).
  for (size_t i = 2; i < args.size(); ++i) {
    if (FlagName(args[i]).empty()) {
      return Status::InvalidArgument(fmt::format("'{}' is not a flag (--name=value)", args[i]));
    }
    auto own = SetOwn(a, args[i]);
    if (!own.ok()) return own.status();
    if (*own) own_given.insert(FlagName(args[i]));
    if (!*own && a.report_only) {
      return Status::InvalidArgument(fmt::format(
          "`report DIR` takes the experiment's options (e.g. --target), not '{}'", args[i]));
    }
    if (!*own) a.flags.push_back(args[i]);
  }
  if (a.report_only) a.run_dir = args[1];
  if (a.algorithms.empty()) {
    return Status::InvalidArgument(a.file +
                                   ": no --algorithm=NAME: --flag=value ... (at least one)");
  }
  if (a.settings.empty()) a.settings.push_back({kDefaultSetting, {}});
  if (Status s = CheckArms(a, own_given); !s.ok()) return s;
  return a;
}

std::string ExperimentFlagFile(const ExperimentArgs& a) {
  std::string text;
  if (!a.about.empty()) {
    std::istringstream in(a.about);
    for (std::string line; std::getline(in, line);) text += "# " + line + "\n";
  }
  text += fmt::format("{}\n--name={}\n--servers={}\n--workers={}\n--repeats={}\n--target={}\n",
                      kResolvedLine, a.name, a.servers, a.workers, a.repeats, a.target);
  if (!a.sweep_lr.empty()) {
    text += fmt::format("--sweep_lr={}\n--sweep_repeats={}\n--validation={}\n",
                        fmt::join(a.sweep_lr, ","), a.sweep_repeats, a.validation);
    if (a.sweep_iterations > 0) text += fmt::format("--sweep_iterations={}\n", a.sweep_iterations);
  }
  for (const auto* group : {&a.settings, &a.algorithms}) {
    for (const ExperimentArm& arm : *group) {
      if (group == &a.settings && arm.name == kDefaultSetting && arm.flags.empty()) continue;
      text += fmt::format("--{}={}:{}{}\n", group == &a.settings ? "setting" : "algorithm",
                          arm.name, arm.flags.empty() ? "" : " ", fmt::join(arm.flags, " "));
    }
  }
  for (const std::string& f : a.flags) text += f + "\n";
  return text;
}

}  // namespace hetps
