// `hetps experiment run FILE`: a grid of real training runs (algorithms x settings x seeds),
// one `hetps launch` after another, each in its own folder, then results.csv, report.md and
// plots (cli/experiment_report.h). Run again, it keeps the finished runs and does the rest, so
// an interrupted grid resumes where it stopped.
//
// The experiment file (deploy/experiments/*.flags) is a flag file: its leading '#' lines
// describe the experiment (they open the report); the experiment's own options below; any
// other line is a role flag every run gets. An arm is "NAME: --flag=value ...":
//   --algorithm=ssp3: --consistency=ssp:staleness=3 --optimizer=sgd:lr=0.05
//   --setting=straggler: --straggler=persistent:factor=3
// An arm may set --servers and --workers of its runs (e.g. settings that grow the cluster).
// A run gets the file's role flags and the command line's, then its setting's, then its
// algorithm's (the last value of a flag wins: the arms are what the experiment varies), then
// --data_seed = the first seed (the flags' --data_seed, default 1) plus
// its repeat (the seed of the split, the minibatches, the initial model and the straggler
// draws), and, unless given, --eval_mode=deferred (measuring never slows training).
//
// A learning-rate sweep (--sweep_lr=0.02,0.05,0.1) runs first: every algorithm in every setting
// trains at each rate on a validation split held out of the training set (--validation
// samples; the test set is never seen), and the grid's runs of that algorithm and setting get
// the rate whose sweep runs scored best (SweepScore), put into their --optimizer spec as lr.
// The sweep's runs live in <root>/sweep/ and resume like the grid's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct ExperimentArm {
  std::string name;
  std::vector<std::string> flags;
};

struct ExperimentArgs {
  bool report_only = false;  // `report DIR`: the report of what DIR holds, nothing run
  std::string file;          // the experiment file (report: DIR/experiment.flags)
  std::string name;          // --name, default the file's name without .flags
  std::string about;         // the file's leading comment, '#' taken off
  int servers = 1;
  int workers = 4;
  int repeats = 3;  // seeds per algorithm and setting
  double target = 0.88;
  std::vector<ExperimentArm> algorithms;
  std::vector<ExperimentArm> settings;  // none given: one, "default", without flags
  std::vector<std::string> flags;       // role flags: the file's, then the command line's
  std::string run_dir;                  // default runs/experiment-<name>
  std::string bin_dir;                  // where hetps-* are; default beside hetps
  int grace_ms = 10000;
  std::vector<std::string> sweep_lr;  // --sweep_lr: the rates tried; empty: no sweep
  int sweep_iterations = 0;           // clocks of a sweep run; 0: the runs' own --iterations
  int sweep_repeats = 1;              // seeds per rate (they follow the grid's seeds)
  int validation = 5000;              // samples the sweep holds out of the training set
};

// One run of the grid.
struct ExperimentRun {
  std::string setting, algorithm;
  int repeat = 0;
  int64_t seed = 0;
  int servers = 1, workers = 4;    // the experiment's, or its arms' --servers, --workers
  std::string dir;                 // <root>/<setting>/<algorithm>/seed<seed>
  std::vector<std::string> flags;  // its role flags, in order
  std::string lr;                  // a sweep run's rate, or the rate a grid run was given
};

// The learning rates chosen by a sweep, by "<setting>/<algorithm>".
using ChosenRates = std::map<std::string, std::string>;
// One sweep run's result: its rate and SweepScore.
struct RateTrial {
  std::string setting, algorithm, lr;
  double score = 0;
};

// Parses what follows `hetps experiment`: `run FILE [--option=value ...] [--role_flag=value
// ...]` or `report DIR [--option=value ...]` (e.g. --target=0.86: the same runs timed to
// another accuracy). Every arm and option is checked before anything runs.
StatusOr<ExperimentArgs> ParseExperimentArgs(const std::vector<std::string>& args);

// The grid in the order it runs: repeat by repeat (so that a slow phase of the machine, or an
// interruption, touches every algorithm alike), within a repeat setting by setting, algorithm
// by algorithm.
// With `rates`, a run whose setting and algorithm have a chosen rate gets it as the lr of its
// last --optimizer spec (appended as one more --optimizer flag).
std::vector<ExperimentRun> ExpandExperiment(const ExperimentArgs& args, const std::string& root,
                                            const ChosenRates& rates = {});

// The sweep's runs in the order they run: seed by seed, setting by setting, algorithm by
// algorithm, rate by rate; each in <root>/sweep/<setting>/<algorithm>/lr<rate>/seed<seed>, with
// the grid run's flags then --optimizer (the rate put in), --validation and, when set,
// --iterations=sweep_iterations. Seeds follow the grid's (its last seed + 1, ...). Empty
// without --sweep_lr.
std::vector<ExperimentRun> ExpandSweep(const ExperimentArgs& args, const std::string& root);

// `spec` (an optimizer spec, "sgd:lr=0.05" or "adam") with its lr parameter set to `lr`.
std::string SpecWithRate(const std::string& spec, const std::string& lr);

// A sweep run's score: the mean accuracy of its evaluations in the last quarter of its clocks
// (steadier than the final one alone); a run without evaluations scores its final accuracy.
struct TrainOutcome;
double SweepScore(const TrainOutcome& outcome);

// Per setting and algorithm, the rate of the highest mean score over its seeds (ties: the rate
// listed first in --sweep_lr). A setting and algorithm missing a trial at some rate gets none.
ChosenRates ChooseRates(const ExperimentArgs& args, const std::vector<RateTrial>& trials);

// sweep.csv (one row per setting, algorithm and rate) and the report's section on the rates.
struct SweepTables {
  std::string csv, markdown;
};
SweepTables DescribeSweep(const ExperimentArgs& args, const std::vector<RateTrial>& trials,
                          const ChosenRates& chosen);

// The experiment as one flag file (written to <root>/experiment.flags; `report` reads it).
std::string ExperimentFlagFile(const ExperimentArgs& args);

// Runs the experiment (or, report_only, only writes the report); returns the exit code (0:
// every run finished; 1: a run failed; 2: a folder was refused; 128 + signal when
// interrupted). `self` is this program (it runs `self launch` per run).
int RunExperiment(const ExperimentArgs& args, const std::string& self);

}  // namespace hetps
