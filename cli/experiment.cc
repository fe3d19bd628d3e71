#include "cli/experiment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "cli/experiment_report.h"
#include "cli/launch_args.h"
#include "cli/report_stats.h"
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
  return a;
}

std::string SpecWithRate(const std::string& spec, const std::string& lr) {
  const size_t colon = spec.find(':');
  std::string params = colon == std::string::npos ? "" : spec.substr(colon + 1);
  std::string kept;
  std::istringstream in(params);
  for (std::string p; std::getline(in, p, ',');) {
    if (p.empty() || Trim(p.substr(0, p.find('='))) == "lr") continue;
    kept += "," + p;
  }
  return fmt::format("{}:lr={}{}", spec.substr(0, colon), lr, kept);
}

namespace {

// A run of `setting` and `algorithm` with the given seed, in `dir`: the experiment's flags, then
// the setting's, then the algorithm's, then its seed.
ExperimentRun MakeRun(const ExperimentArgs& a, const ExperimentArm& setting,
                      const ExperimentArm& algorithm, int repeat, int64_t seed, std::string dir) {
  ExperimentRun run;
  run.setting = setting.name;
  run.algorithm = algorithm.name;
  run.repeat = repeat;
  run.seed = seed;
  run.dir = std::move(dir);
  if (LastFlagValue(a.flags, "eval_mode").empty()) run.flags.push_back("--eval_mode=deferred");
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
  return run;
}

void GiveRate(ExperimentRun& run, const std::string& lr) {
  run.lr = lr;
  run.flags.push_back("--optimizer=" + SpecWithRate(LastFlagValue(run.flags, "optimizer"), lr));
}

int64_t FirstSeed(const ExperimentArgs& a) {
  const std::string first = LastFlagValue(a.flags, "data_seed");
  return first.empty() ? 1 : std::atoll(first.c_str());
}

}  // namespace

std::vector<ExperimentRun> ExpandSweep(const ExperimentArgs& a, const std::string& root) {
  std::vector<ExperimentRun> sweep;
  if (a.sweep_lr.empty()) return sweep;
  for (int r = 0; r < a.sweep_repeats; ++r) {
    const int64_t seed = FirstSeed(a) + a.repeats + r;
    for (const ExperimentArm& setting : a.settings) {
      for (const ExperimentArm& algorithm : a.algorithms) {
        for (const std::string& lr : a.sweep_lr) {
          ExperimentRun run = MakeRun(a, setting, algorithm, r, seed,
                                      fmt::format("{}/sweep/{}/{}/lr{}/seed{}", root, setting.name,
                                                  algorithm.name, lr, seed));
          GiveRate(run, lr);
          run.flags.push_back(fmt::format("--validation={}", a.validation));
          if (a.sweep_iterations > 0) {
            run.flags.push_back(fmt::format("--iterations={}", a.sweep_iterations));
          }
          sweep.push_back(std::move(run));
        }
      }
    }
  }
  return sweep;
}

double SweepScore(const TrainOutcome& o) {
  if (o.curve.empty()) return o.final_accuracy;
  int64_t last = 0;
  for (const auto& p : o.curve) last = std::max(last, p.clock);
  double sum = 0;
  int n = 0;
  for (const auto& p : o.curve) {
    if (4 * p.clock < 3 * last) continue;
    sum += p.accuracy;
    ++n;
  }
  return sum / n;
}

ChosenRates ChooseRates(const ExperimentArgs& a, const std::vector<RateTrial>& trials) {
  ChosenRates chosen;
  for (const ExperimentArm& setting : a.settings) {
    for (const ExperimentArm& algorithm : a.algorithms) {
      std::optional<double> best;
      std::string best_lr;
      bool complete = true;
      for (const std::string& lr : a.sweep_lr) {
        std::vector<double> scores;
        for (const RateTrial& t : trials) {
          if (t.setting == setting.name && t.algorithm == algorithm.name && t.lr == lr) {
            scores.push_back(t.score);
          }
        }
        if (scores.empty()) {
          complete = false;
          break;
        }
        const double mean = MeanAndCi(scores).mean;
        if (!best || mean > *best) {
          best = mean;
          best_lr = lr;
        }
      }
      if (complete && best) chosen[setting.name + "/" + algorithm.name] = best_lr;
    }
  }
  return chosen;
}

std::vector<ExperimentRun> ExpandExperiment(const ExperimentArgs& a, const std::string& root,
                                            const ChosenRates& rates) {
  std::vector<ExperimentRun> grid;
  for (int r = 0; r < a.repeats; ++r) {
    const int64_t seed = FirstSeed(a) + r;
    for (const ExperimentArm& setting : a.settings) {
      for (const ExperimentArm& algorithm : a.algorithms) {
        ExperimentRun run =
            MakeRun(a, setting, algorithm, r, seed,
                    fmt::format("{}/{}/{}/seed{}", root, setting.name, algorithm.name, seed));
        const auto rate = rates.find(setting.name + "/" + algorithm.name);
        if (rate != rates.end()) GiveRate(run, rate->second);
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

namespace {

// The sweep's finished runs, scored (a run whose files do not parse is said and left out).
std::vector<RateTrial> Trials(const std::vector<ExperimentRun>& sweep, const RunSeries* series) {
  std::map<std::string, std::string> lr_of;  // by folder
  for (const ExperimentRun& run : sweep) lr_of[run.dir] = run.lr;
  std::vector<RateTrial> trials;
  for (const TrainOutcome& o : Outcomes(sweep, 1.0, series)) {
    trials.push_back({o.setting, o.algorithm, lr_of[o.dir], SweepScore(o)});
  }
  return trials;
}

// sweep.csv (one row per setting, algorithm and rate) and the report's section on the rates.
struct SweepTables {
  std::string csv, markdown;
};
SweepTables DescribeSweep(const ExperimentArgs& a, const std::vector<RateTrial>& trials,
                          const ChosenRates& chosen) {
  SweepTables t;
  t.csv = "setting,algorithm,lr,runs,mean_score,ci95,chosen\n";
  t.markdown = fmt::format(
      "## Learning rates\n\n"
      "Each algorithm's rate in each setting was chosen by a sweep before the grid: it trained "
      "at each rate for {} clocks on {} seed{} (seeds after the grid's), holding {} samples out "
      "of the training set as a validation split; a run's score is its mean validation accuracy "
      "over the last quarter of its clocks, and the grid's runs (trained on the whole training "
      "set, measured on the test set) got the rate of the best mean score, in bold (mean ± 95% "
      "interval when there are several seeds). The test set was not used to choose.\n\n"
      "| setting | algorithm | {} |\n|---|---|{}\n",
      a.sweep_iterations > 0 ? fmt::format("{}", a.sweep_iterations) : "the runs'", a.sweep_repeats,
      a.sweep_repeats == 1 ? "" : "s", a.validation, fmt::join(a.sweep_lr, " | "), [&] {
        std::string cols;
        for (size_t i = 0; i < a.sweep_lr.size(); ++i) cols += "---|";
        return cols;
      }());
  for (const ExperimentArm& setting : a.settings) {
    for (const ExperimentArm& algorithm : a.algorithms) {
      const std::string key = setting.name + "/" + algorithm.name;
      const auto pick = chosen.find(key);
      std::string row = fmt::format("| {} | {} |", setting.name, algorithm.name);
      for (const std::string& lr : a.sweep_lr) {
        std::vector<double> scores;
        for (const RateTrial& trial : trials) {
          if (trial.setting == setting.name && trial.algorithm == algorithm.name &&
              trial.lr == lr) {
            scores.push_back(trial.score);
          }
        }
        const bool is_chosen = pick != chosen.end() && pick->second == lr;
        const MeanCi m = MeanAndCi(scores);
        t.csv +=
            fmt::format("{},{},{},{},{},{},{}\n", setting.name, algorithm.name, lr, scores.size(),
                        scores.empty() ? "" : fmt::format("{:.4f}", m.mean),
                        scores.size() < 2 ? "" : fmt::format("{:.4f}", m.ci95), is_chosen ? 1 : 0);
        const std::string cell = ShowMeanCi(m, "{:.4f}");
        row += is_chosen ? fmt::format(" **{}** |", cell) : fmt::format(" {} |", cell);
      }
      t.markdown += row + "\n";
    }
  }
  return t;
}

std::string Count(size_t n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

}  // namespace

int RunExperiment(const ExperimentArgs& a, const std::string& self) {
  const std::string root = fs::absolute(a.run_dir.empty() ? "runs/experiment-" + a.name : a.run_dir)
                               .lexically_normal()
                               .string();
  const std::vector<ExperimentRun> sweep = ExpandSweep(a, root);
  ExperimentReportInfo info = ReportInfo(a);
  // The sweep's result: its tables, and the rates the grid's runs get.
  auto conclude_sweep = [&](const RunSeries* series) {
    const std::vector<RateTrial> trials = Trials(sweep, series);
    const ChosenRates chosen = ChooseRates(a, trials);
    const SweepTables tables = DescribeSweep(a, trials, chosen);
    if (Status s = WriteText(root + "/sweep.csv", tables.csv); !s.ok()) {
      std::fprintf(stderr, "hetps experiment: %s\n", s.message().c_str());
    }
    info.rates = tables.markdown;
    return chosen;
  };
  if (a.report_only) {  // ParseExperimentArgs read <root>/experiment.flags
    const ChosenRates rates = sweep.empty() ? ChosenRates{} : conclude_sweep(nullptr);
    const std::vector<ExperimentRun> grid = ExpandExperiment(a, root, rates);
    const auto outcomes = Outcomes(grid, a.target, nullptr);
    if (Status s = WriteExperimentReport(root, outcomes, info); !s.ok()) {
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
  if (Status s = WriteText(root + "/experiment.flags", resolved); !s.ok()) {
    series.Say(s.message());
    return 1;
  }
  const size_t grid_size = static_cast<size_t>(a.repeats) * a.settings.size() * a.algorithms.size();
  const size_t total = sweep.size() + grid_size;
  series.Say(fmt::format("{}: {} ({} x {} x {}{}) in {}", a.name, Count(total, "run"),
                         Count(a.algorithms.size(), "algorithm"),
                         Count(a.settings.size(), "setting"),
                         Count(static_cast<size_t>(a.repeats), "seed"),
                         sweep.empty() ? ""
                                       : fmt::format(", after a sweep of {} rates: {}",
                                                     a.sweep_lr.size(), Count(sweep.size(), "run")),
                         root));
  bool failed = false;
  size_t done = 0;
  // Runs `runs` one after another; false when the series must stop (interrupted, refused).
  int stop_code = 0;
  auto run_all = [&](const std::vector<ExperimentRun>& runs, double target) {
    for (const ExperimentRun& r : runs) {
      SeriesRun run;
      run.label = &runs == &sweep ? fmt::format("sweep {}/{} lr {} seed {}", r.setting, r.algorithm,
                                                r.lr, r.seed)
                                  : fmt::format("{}/{} seed {}", r.setting, r.algorithm, r.seed);
      run.dir = r.dir;
      run.argv = {self,
                  "launch",
                  fmt::format("--servers={}", r.servers),
                  fmt::format("--workers={}", r.workers),
                  "--run_dir=" + r.dir,
                  fmt::format("--grace_ms={}", a.grace_ms)};
      if (!a.bin_dir.empty()) run.argv.push_back("--bin_dir=" + a.bin_dir);
      run.argv.insert(run.argv.end(), r.flags.begin(), r.flags.end());
      run.headline =
          fmt::format("{} server{}, {} worker{}{}", r.servers, r.servers == 1 ? "" : "s", r.workers,
                      r.workers == 1 ? "" : "s", r.lr.empty() ? "" : ", lr " + r.lr);
      std::string shown;
      auto next_show = std::chrono::steady_clock::now();
      run.progress = [&] {
        if (std::chrono::steady_clock::now() < next_show) return;
        next_show = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        const std::string p = LastProgress(r.dir + "/launch.log");
        if (!p.empty() && p != shown) series.Say(fmt::format("{}: {}", run.label, p));
        shown = p;
      };
      const RunSeries::End end = series.Run(run, ++done, total);
      if (end == RunSeries::End::kInterrupted) {
        stop_code = series.InterruptedCode();
        return false;
      }
      if (end == RunSeries::End::kRefused) {
        stop_code = 2;
        return false;
      }
      if (end == RunSeries::End::kFailed) {
        failed = true;
        continue;
      }
      auto o =
          ParseTrainOutcome(Slurp(r.dir + "/metrics.csv"), Slurp(r.dir + "/summary.json"), target);
      if (!o.ok()) {
        series.Say(fmt::format("{}: {}", run.label, o.status().message()));
        failed = true;
        continue;
      }
      const std::string reached =
          &runs == &sweep ? fmt::format("score {:.4f} (validation accuracy over the last quarter)",
                                        SweepScore(*o))
          : o->at_target  ? fmt::format("{} reached after {:.1f} s (clock {})", target,
                                        o->at_target->wall_s, o->at_target->clock)
                          : fmt::format("{} not reached", target);
      series.Say(fmt::format("{}: {}; final {} accuracy {:.4f}; {:.0f} samples/s over {:.1f} s",
                             run.label, reached, o->eval_set, o->final_accuracy, o->samples_per_s,
                             o->wall_s));
    }
    return true;
  };
  ChosenRates rates;
  if (!sweep.empty()) {
    if (!run_all(sweep, 1.0)) return stop_code;
    rates = conclude_sweep(&series);
    if (rates.size() != a.settings.size() * a.algorithms.size()) {
      series.Say(fmt::format(
          "the sweep did not finish a run at every rate of every algorithm and setting, so no "
          "rate is chosen for {} of them; see {}/sweep.csv, and run again to retry the failed "
          "runs",
          a.settings.size() * a.algorithms.size() - rates.size(), root));
      return 1;
    }
    for (const auto& [key, lr] : rates)
      series.Say(fmt::format("sweep chose lr {} for {}", lr, key));
  }
  const std::vector<ExperimentRun> grid = ExpandExperiment(a, root, rates);
  if (!run_all(grid, a.target)) return stop_code;
  const auto outcomes = Outcomes(grid, a.target, &series);
  if (Status s = WriteExperimentReport(root, outcomes, info); !s.ok()) {
    series.Say(s.message());
    return 1;
  }
  series.Say(fmt::format("{} of {} runs finished; report: {}/report.md, results.csv, plots/{}",
                         outcomes.size(), grid.size(), root, sweep.empty() ? "" : ", sweep.csv"));
  std::fputs(Slurp(root + "/report.md").c_str(), stdout);
  return failed || outcomes.size() != grid.size() ? 1 : 0;
}

}  // namespace hetps
