// The runs of an experiment: the grid (settings x algorithms x seeds) and the learning-rate sweep
// before it, with their folders, flags and seeds; how the sweep's runs are scored and the rates
// chosen; and the sweep's tables.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "cli/experiment.h"
#include "cli/experiment_report.h"
#include "cli/launch_args.h"
#include "cli/report_stats.h"

namespace hetps {

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
  auto seed = SeedArg("data_seed", first);  // checked by ParseExperimentArgs
  return first.empty() || !seed.ok() ? 1 : *seed;
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

// sweep.csv (one row per setting, algorithm and rate) and the report's section on the rates.
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

}  // namespace hetps
