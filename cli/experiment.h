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
#pragma once

#include <cstdint>
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
};

// One run of the grid.
struct ExperimentRun {
  std::string setting, algorithm;
  int repeat = 0;
  int64_t seed = 0;
  int servers = 1, workers = 4;    // the experiment's, or its arms' --servers, --workers
  std::string dir;                 // <root>/<setting>/<algorithm>/seed<seed>
  std::vector<std::string> flags;  // its role flags, in order
};

// Parses what follows `hetps experiment`: `run FILE [--option=value ...] [--role_flag=value
// ...]` or `report DIR [--option=value ...]` (e.g. --target=0.86: the same runs timed to
// another accuracy). Every arm and option is checked before anything runs.
StatusOr<ExperimentArgs> ParseExperimentArgs(const std::vector<std::string>& args);

// The grid in the order it runs: repeat by repeat (so that a slow phase of the machine, or an
// interruption, touches every algorithm alike), within a repeat setting by setting, algorithm
// by algorithm.
std::vector<ExperimentRun> ExpandExperiment(const ExperimentArgs& args, const std::string& root);

// The experiment as one flag file (written to <root>/experiment.flags; `report` reads it).
std::string ExperimentFlagFile(const ExperimentArgs& args);

// Runs the experiment (or, report_only, only writes the report); returns the exit code (0:
// every run finished; 1: a run failed; 2: a folder was refused; 128 + signal when
// interrupted). `self` is this program (it runs `self launch` per run).
int RunExperiment(const ExperimentArgs& args, const std::string& self);

}  // namespace hetps
