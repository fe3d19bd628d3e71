#include "cli/experiment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/experiment_report.h"
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
  for (const Int& o : {Int{"servers", &a.servers, 1}, Int{"workers", &a.workers, 1},
                       Int{"repeats", &a.repeats, 1}, Int{"grace_ms", &a.grace_ms, 0}}) {
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
  if (name == "algorithm" || name == "setting") {
    auto arm = ParseArm(name, value);
    if (!arm.ok()) return arm.status();
    auto& arms = name == "algorithm" ? a.algorithms : a.settings;
    for (const ExperimentArm& other : arms) {
      if (other.name == arm->name) {
        return Status::InvalidArgument(fmt::format("--{}={} is given twice", name, arm->name));
      }
    }
    arms.push_back(std::move(*arm));
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

std::string JoinFlags(const std::vector<std::string>& flags) {
  return flags.empty() ? "none" : fmt::format("`{}`", fmt::join(flags, " "));
}

// The finished runs' outcomes, in grid order (runs that did not finish are left out).
std::vector<TrainOutcome> Outcomes(const std::vector<ExperimentRun>& grid, double target,
                                   const RunSeries* series) {
  std::vector<TrainOutcome> outcomes;
  for (const ExperimentRun& run : grid) {
    if (!fs::exists(run.dir + "/done")) continue;
    auto o = ParseTrainOutcome(Slurp(run.dir + "/metrics.csv"), Slurp(run.dir + "/summary.json"),
                               target);
    if (!o.ok()) {
      const std::string line = fmt::format("{}: {}", run.dir, o.status().message());
      if (series != nullptr) {
        series->Say(line);
      } else {
        std::fprintf(stderr, "hetps experiment: %s\n", line.c_str());
      }
      continue;
    }
    o->setting = run.setting;
    o->algorithm = run.algorithm;
    o->repeat = run.repeat;
    o->seed = run.seed;
    o->dir = run.dir;
    outcomes.push_back(std::move(*o));
  }
  return outcomes;
}

ExperimentReportInfo ReportInfo(const ExperimentArgs& a) {
  ExperimentReportInfo info;
  info.name = a.name;
  info.about = a.about;
  info.target = a.target;
  info.repeats = a.repeats;
  for (const auto& s : a.settings) info.settings.push_back(s.name);
  for (const auto& g : a.algorithms) info.algorithms.push_back(g.name);
  std::string arms;
  for (const auto* group : {&a.settings, &a.algorithms}) {
    for (const ExperimentArm& arm : *group) {
      arms += fmt::format("\n- {} `{}`: {}", group == &a.settings ? "setting" : "algorithm",
                          arm.name, JoinFlags(arm.flags));
    }
  }
  const std::vector<ExperimentRun> grid = ExpandExperiment(a, "");
  info.how = fmt::format(
      "{} server{} and {} worker{} (unless an arm says otherwise) on this machine (`hetps "
      "launch`), one run at a time; seeds "
      "(`--data_seed`: the split, the minibatches, the initial model and the straggler draws) "
      "{} to {}; target test accuracy {}. Flags of every run: {}. Arms:{}",
      a.servers, a.servers == 1 ? "" : "s", a.workers, a.workers == 1 ? "" : "s",
      grid.empty() ? 0 : grid.front().seed, grid.empty() ? 0 : grid.back().seed, a.target,
      JoinFlags(a.flags), arms);
  return info;
}

// The last progress line of worker 0 in a run's launch.log, e.g. "iter 250/1500 ...".
std::string LastProgress(const std::string& launch_log) {
  const std::string log = Slurp(launch_log);
  std::string last;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[worker 0] ", 0) == 0 && line.find(" iter ") != std::string::npos) {
      last = line.substr(line.find("epoch") == std::string::npos ? 0 : line.find("epoch"));
    }
  }
  return last;
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
  for (const std::string& line : lines) {
    auto own = SetOwn(a, line);
    if (!own.ok()) return Status::InvalidArgument(a.file + ": " + own.status().message());
    if (!*own) a.flags.push_back(line);
  }
  // The command line's options replace the file's (its arms add to them).
  for (size_t i = 2; i < args.size(); ++i) {
    if (FlagName(args[i]).empty()) {
      return Status::InvalidArgument(fmt::format("'{}' is not a flag (--name=value)", args[i]));
    }
    auto own = SetOwn(a, args[i]);
    if (!own.ok()) return own.status();
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
  for (const auto* group : {&a.settings, &a.algorithms}) {
    for (const ExperimentArm& arm : *group) {
      for (const std::string& f : arm.flags) {
        if (FlagName(f) == "data_seed" || FlagName(f) == "run_dir") {
          return Status::InvalidArgument(
              fmt::format("{}: {} sets --{}, which the experiment sets per run", a.file, arm.name,
                          FlagName(f)));
        }
      }
    }
  }
  return a;
}

std::vector<ExperimentRun> ExpandExperiment(const ExperimentArgs& a, const std::string& root) {
  const std::vector<std::string>& all = a.flags;
  const std::string first = LastFlagValue(all, "data_seed");
  const int64_t first_seed = first.empty() ? 1 : std::atoll(first.c_str());
  const bool eval_mode_given = !LastFlagValue(all, "eval_mode").empty();
  std::vector<ExperimentRun> grid;
  for (int r = 0; r < a.repeats; ++r) {
    for (const ExperimentArm& setting : a.settings) {
      for (const ExperimentArm& algorithm : a.algorithms) {
        ExperimentRun run;
        run.setting = setting.name;
        run.algorithm = algorithm.name;
        run.repeat = r;
        run.seed = first_seed + r;
        run.dir = fmt::format("{}/{}/{}/seed{}", root, setting.name, algorithm.name, run.seed);
        if (!eval_mode_given) run.flags.push_back("--eval_mode=deferred");
        run.flags.insert(run.flags.end(), a.flags.begin(), a.flags.end());
        run.servers = a.servers;
        run.workers = a.workers;
        for (const auto* arm : {&setting, &algorithm}) {
          for (const std::string& f : arm->flags) {
            const ArgParts parts = SplitArg(f);
            const std::string name = FlagName(f);
            if (name == "servers" || name == "workers") {  // checked by ParseArm
              (name == "servers" ? run.servers : run.workers) = std::atoi(parts.value.c_str());
            } else {
              run.flags.push_back(f);
            }
          }
        }
        run.flags.push_back(fmt::format("--data_seed={}", run.seed));
        grid.push_back(std::move(run));
      }
    }
  }
  return grid;
}

std::string ExperimentFlagFile(const ExperimentArgs& a) {
  std::string text;
  if (!a.about.empty()) {
    std::istringstream in(a.about);
    for (std::string line; std::getline(in, line);) text += "# " + line + "\n";
  }
  text += fmt::format("{}\n--name={}\n--servers={}\n--workers={}\n--repeats={}\n--target={}\n",
                      kResolvedLine, a.name, a.servers, a.workers, a.repeats, a.target);
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

int RunExperiment(const ExperimentArgs& a, const std::string& self) {
  const std::string root = fs::absolute(a.run_dir.empty() ? "runs/experiment-" + a.name : a.run_dir)
                               .lexically_normal()
                               .string();
  const std::vector<ExperimentRun> grid = ExpandExperiment(a, root);
  if (a.report_only) {  // ParseExperimentArgs read <root>/experiment.flags
    const auto outcomes = Outcomes(grid, a.target, nullptr);
    if (Status s = WriteExperimentReport(root, outcomes, ReportInfo(a)); !s.ok()) {
      std::fprintf(stderr, "hetps experiment: %s\n", s.message().c_str());
      return 1;
    }
    std::printf("%zu of %zu runs finished; report: %s/report.md\n", outcomes.size(), grid.size(),
                root.c_str());
    return 0;
  }
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    std::fprintf(stderr, "hetps experiment: cannot create %s: %s\n", root.c_str(),
                 ec.message().c_str());
    return 1;
  }
  RunSeries series("experiment", "experiment.run");
  const std::string resolved = ExperimentFlagFile(a);
  // More (or fewer) seeds of the same experiment keep the runs it has: only --repeats differs.
  auto without_repeats = [](const std::string& text) {
    std::string kept;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("--repeats=", 0) != 0) kept += line + "\n";
    }
    return kept;
  };
  if (fs::exists(root + "/experiment.flags") &&
      without_repeats(Slurp(root + "/experiment.flags")) != without_repeats(resolved)) {
    series.Say(fmt::format(
        "{} holds an experiment with other settings (its experiment.flags); give another "
        "--run_dir, or `hetps experiment run {}/experiment.flags --run_dir={}` to resume it",
        root, root, root));
    return 2;
  }
  std::ofstream(root + "/experiment.flags") << resolved;
  auto count = [](size_t n, const char* what) {
    return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
  };
  series.Say(fmt::format("{}: {} ({} x {} x {}) in {}", a.name, count(grid.size(), "run"),
                         count(a.algorithms.size(), "algorithm"),
                         count(a.settings.size(), "setting"),
                         count(static_cast<size_t>(a.repeats), "seed"), root));
  bool failed = false;
  for (size_t i = 0; i < grid.size(); ++i) {
    const ExperimentRun& r = grid[i];
    SeriesRun run;
    run.label = fmt::format("{}/{} seed {}", r.setting, r.algorithm, r.seed);
    run.dir = r.dir;
    run.argv = {self,
                "launch",
                fmt::format("--servers={}", r.servers),
                fmt::format("--workers={}", r.workers),
                "--run_dir=" + r.dir,
                fmt::format("--grace_ms={}", a.grace_ms)};
    if (!a.bin_dir.empty()) run.argv.push_back("--bin_dir=" + a.bin_dir);
    run.argv.insert(run.argv.end(), r.flags.begin(), r.flags.end());
    run.headline = fmt::format("{} server{}, {} worker{}", r.servers, r.servers == 1 ? "" : "s",
                               r.workers, r.workers == 1 ? "" : "s");
    std::string shown;
    auto next_show = std::chrono::steady_clock::now();
    run.progress = [&] {
      if (std::chrono::steady_clock::now() < next_show) return;
      next_show = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      const std::string p = LastProgress(r.dir + "/launch.log");
      if (!p.empty() && p != shown) series.Say(fmt::format("{}: {}", run.label, p));
      shown = p;
    };
    const RunSeries::End end = series.Run(run, i + 1, grid.size());
    if (end == RunSeries::End::kInterrupted) return series.InterruptedCode();
    if (end == RunSeries::End::kRefused) return 2;
    if (end == RunSeries::End::kFailed) {
      failed = true;
      continue;
    }
    auto o =
        ParseTrainOutcome(Slurp(r.dir + "/metrics.csv"), Slurp(r.dir + "/summary.json"), a.target);
    if (!o.ok()) {
      series.Say(fmt::format("{}: {}", run.label, o.status().message()));
      failed = true;
      continue;
    }
    series.Say(
        fmt::format("{}: {}; final accuracy {:.4f}; {:.0f} samples/s over {:.1f} s", run.label,
                    o->at_target ? fmt::format("{} reached after {:.1f} s (clock {})", a.target,
                                               o->at_target->wall_s, o->at_target->clock)
                                 : fmt::format("{} not reached", a.target),
                    o->final_accuracy, o->samples_per_s, o->wall_s));
  }
  const auto outcomes = Outcomes(grid, a.target, &series);
  if (Status s = WriteExperimentReport(root, outcomes, ReportInfo(a)); !s.ok()) {
    series.Say(s.message());
    return 1;
  }
  series.Say(fmt::format("{} of {} runs finished; report: {}/report.md, results.csv, plots/",
                         outcomes.size(), grid.size(), root));
  std::fputs(Slurp(root + "/report.md").c_str(), stdout);
  return failed || outcomes.size() != grid.size() ? 1 : 0;
}

}  // namespace hetps
