// `hetps experiment`'s orchestration: the runs of the sweep, then of the grid, one `hetps
// launch` after another (cli/run_series.h), the sweep's rates given to the grid, and the report.
// Its arguments are cli/experiment_args.cc's, its runs cli/experiment_runs.cc's.
#include "cli/experiment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>

#include "cli/experiment_report.h"
#include "cli/run_series.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

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

std::string Count(size_t n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

// More (or fewer) seeds of the same experiment keep the runs it has: only --repeats differs.
std::string WithoutRepeats(const std::string& text) {
  std::string kept;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("--repeats=", 0) != 0) kept += line + "\n";
  }
  return kept;
}

// One `hetps experiment run`: its folder, its series of launches and what they gave.
class Experiment {
 public:
  Experiment(const ExperimentArgs& a, std::string self)
      : a_(a),
        self_(std::move(self)),
        root_(fs::absolute(a.run_dir.empty() ? "runs/experiment-" + a.name : a.run_dir)
                  .lexically_normal()
                  .string()),
        sweep_(ExpandSweep(a, root_)),
        info_(ReportInfo(a)) {}

  // Only the report of what the folder holds.
  int Report();
  int Run();

 private:
  // The sweep's result: its tables (sweep.csv, the report's section), and the rates the grid's
  // runs get.
  ChosenRates ConcludeSweep(const RunSeries* series);
  // Makes the folder and writes experiment.flags; refuses (2) a folder of another experiment.
  int Prepare(RunSeries& series);
  // Runs `runs` one after another; false when the series must stop (interrupted, refused).
  bool RunAll(RunSeries& series, const std::vector<ExperimentRun>& runs, double target);
  // One run; false when the series must stop.
  bool RunOne(RunSeries& series, const ExperimentRun& r, bool sweep, double target);

  const ExperimentArgs& a_;
  const std::string self_;
  const std::string root_;
  const std::vector<ExperimentRun> sweep_;
  ExperimentReportInfo info_;
  size_t done_ = 0, total_ = 0;
  bool failed_ = false;
  int stop_code_ = 0;
};

ChosenRates Experiment::ConcludeSweep(const RunSeries* series) {
  const std::vector<RateTrial> trials = Trials(sweep_, series);
  const ChosenRates chosen = ChooseRates(a_, trials);
  const SweepTables tables = DescribeSweep(a_, trials, chosen);
  if (Status s = WriteText(root_ + "/sweep.csv", tables.csv); !s.ok()) {
    std::fprintf(stderr, "hetps experiment: %s\n", s.message().c_str());
  }
  info_.rates = tables.markdown;
  return chosen;
}

int Experiment::Report() {  // ParseExperimentArgs read <root>/experiment.flags
  const ChosenRates rates = sweep_.empty() ? ChosenRates{} : ConcludeSweep(nullptr);
  const std::vector<ExperimentRun> grid = ExpandExperiment(a_, root_, rates);
  const auto outcomes = Outcomes(grid, a_.target, nullptr);
  if (Status s = WriteExperimentReport(root_, outcomes, info_); !s.ok()) {
    std::fprintf(stderr, "hetps experiment: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("%zu of %zu runs finished; report: %s/report.md\n", outcomes.size(), grid.size(),
              root_.c_str());
  return 0;
}

int Experiment::Prepare(RunSeries& series) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) {
    series.Say(fmt::format("cannot create {}: {}", root_, ec.message()));
    return 1;
  }
  const std::string resolved = ExperimentFlagFile(a_);
  if (fs::exists(root_ + "/experiment.flags") &&
      WithoutRepeats(Slurp(root_ + "/experiment.flags")) != WithoutRepeats(resolved)) {
    series.Say(fmt::format(
        "{} holds an experiment with other settings (its experiment.flags); give another "
        "--run_dir, or `hetps experiment run {}/experiment.flags --run_dir={}` to resume it",
        root_, root_, root_));
    return 2;
  }
  if (Status s = WriteText(root_ + "/experiment.flags", resolved); !s.ok()) {
    series.Say(s.message());
    return 1;
  }
  return 0;
}

int Experiment::Run() {
  RunSeries series("experiment", "experiment.run");
  if (int code = Prepare(series); code != 0) return code;
  const size_t grid_size =
      static_cast<size_t>(a_.repeats) * a_.settings.size() * a_.algorithms.size();
  total_ = sweep_.size() + grid_size;
  series.Say(
      fmt::format("{}: {} ({} x {} x {}{}) in {}", a_.name, Count(total_, "run"),
                  Count(a_.algorithms.size(), "algorithm"), Count(a_.settings.size(), "setting"),
                  Count(static_cast<size_t>(a_.repeats), "seed"),
                  sweep_.empty() ? ""
                                 : fmt::format(", after a sweep of {} rates: {}",
                                               a_.sweep_lr.size(), Count(sweep_.size(), "run")),
                  root_));
  ChosenRates rates;
  if (!sweep_.empty()) {
    if (!RunAll(series, sweep_, 1.0)) return stop_code_;
    rates = ConcludeSweep(&series);
    const size_t pairs = a_.settings.size() * a_.algorithms.size();
    if (rates.size() != pairs) {
      series.Say(fmt::format(
          "the sweep did not finish a run at every rate of every algorithm and setting, so no "
          "rate is chosen for {} of them; see {}/sweep.csv, and run again to retry the failed "
          "runs",
          pairs - rates.size(), root_));
      return 1;
    }
    for (const auto& [key, lr] : rates) {
      series.Say(fmt::format("sweep chose lr {} for {}", lr, key));
    }
  }
  const std::vector<ExperimentRun> grid = ExpandExperiment(a_, root_, rates);
  if (!RunAll(series, grid, a_.target)) return stop_code_;
  const auto outcomes = Outcomes(grid, a_.target, &series);
  if (Status s = WriteExperimentReport(root_, outcomes, info_); !s.ok()) {
    series.Say(s.message());
    return 1;
  }
  series.Say(fmt::format("{} of {} runs finished; report: {}/report.md, results.csv, plots/{}",
                         outcomes.size(), grid.size(), root_, sweep_.empty() ? "" : ", sweep.csv"));
  std::fputs(Slurp(root_ + "/report.md").c_str(), stdout);
  return failed_ || outcomes.size() != grid.size() ? 1 : 0;
}

bool Experiment::RunAll(RunSeries& series, const std::vector<ExperimentRun>& runs, double target) {
  for (const ExperimentRun& r : runs) {
    if (!RunOne(series, r, &runs == &sweep_, target)) return false;
  }
  return true;
}

bool Experiment::RunOne(RunSeries& series, const ExperimentRun& r, bool sweep, double target) {
  SeriesRun run;
  run.label = sweep ? fmt::format("sweep {}/{} lr {} seed {}", r.setting, r.algorithm, r.lr, r.seed)
                    : fmt::format("{}/{} seed {}", r.setting, r.algorithm, r.seed);
  run.dir = r.dir;
  run.argv = LaunchArgv(self_, {r.servers, r.workers, r.dir, a_.bin_dir, a_.grace_ms}, r.flags);
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
  const RunSeries::End end = series.Run(run, ++done_, total_);
  if (end == RunSeries::End::kInterrupted || end == RunSeries::End::kRefused) {
    stop_code_ = end == RunSeries::End::kRefused ? 2 : series.InterruptedCode();
    return false;
  }
  if (end == RunSeries::End::kFailed) {
    failed_ = true;
    return true;
  }
  auto o = ParseTrainOutcome(Slurp(r.dir + "/metrics.csv"), Slurp(r.dir + "/summary.json"), target);
  if (!o.ok()) {
    series.Say(fmt::format("{}: {}", run.label, o.status().message()));
    failed_ = true;
    return true;
  }
  const std::string reached =
      sweep
          ? fmt::format("score {:.4f} (validation accuracy over the last quarter)", SweepScore(*o))
      : o->at_target ? fmt::format("{} reached after {:.1f} s (clock {})", target,
                                   o->at_target->wall_s, o->at_target->clock)
                     : fmt::format("{} not reached", target);
  series.Say(fmt::format("{}: {}; final {} accuracy {:.4f}; {:.0f} samples/s over {:.1f} s",
                         run.label, reached, o->eval_set, o->final_accuracy, o->samples_per_s,
                         o->wall_s));
  return true;
}

}  // namespace

int RunExperiment(const ExperimentArgs& a, const std::string& self) {
  Experiment experiment(a, self);
  return a.report_only ? experiment.Report() : experiment.Run();
}

}  // namespace hetps
