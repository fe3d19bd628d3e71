// `hetps fed run|compare`: federated experiments with one command. A scenario flag file
// (deploy/edge/*.flags) describes the clients, data, devices, links and availability; an
// algorithm is a preset (below) that adds the servers' and scheduler's flags, sized by the
// experiment's settings (clients training at once, uploads per aggregation, the budget of
// applied uploads, how often the evaluator measures), so that every algorithm of a comparison
// gets the same work. Each run is a `hetps launch` of its own (output in <run>/launch.log),
// one after another over the identical seeded scenario; progress shows on the terminal; the
// run folder gets report.md, summary.json and plot.png (cli/fed_report.h).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct FedArgs {
  bool compare = false;  // compare: several algorithms, each in <run_dir>/<name>
  std::string flagfile;  // the scenario
  // Presets (FedPresetNames()), flag files (a path ending in .flags), or either followed by
  // "+--flag=value" parts that apply to that run only, e.g. "aafl+--ratio=fixed:alpha=0.3".
  std::vector<std::string> algorithms;
  int clients = 20;  // edge clients (the evaluators come on top)
  int servers = 2;
  double target = 0.80;   // test accuracy the report measures time and bytes to
  int parallel = 7;       // clients training at once (fedavg: selected per round)
  int per_round = 5;      // uploads per aggregation (fedavg's K, fedbuff's K, fedsa's quorum)
  int uploads = 200;      // applied uploads per run
  int eval_uploads = 20;  // the evaluator measures every this many applied uploads
  // Runs per algorithm; repeat r (0, 1, ...) runs with --selection_seed + r, in
  // <algorithm>/r<r+1>, and the report gives means with 95% confidence intervals.
  int repeats = 1;
  std::string run_dir;  // default runs/fed-<timestamp>
  std::string bin_dir;  // where hetps-* are; default beside hetps
  int grace_ms = 10000;
  // --client_cmd: every client (and evaluator) runs this program instead of hetps-worker
  // --workload=edge (hetps launch --worker_cmd); --clients_per_process: ranks per such
  // process (hetps launch --workers_per_process).
  std::string client_cmd;
  int clients_per_process = 1;
  // Role flags: the scenario's lines (less the options above, which the scenario may set), and
  // the command line's. A run gets the scenario's, then the algorithm's, then the command
  // line's, then the item's own parts (the last value of a flag wins).
  std::vector<std::string> scenario_flags, role_flags;
};

// Parses what follows `hetps fed`: run|compare, then --flagfile=F, --algorithm=A (repeatable),
// --algorithms=A,B,..., the options above as --name=value, and role flags. A "--flagfile=G"
// line in the scenario includes G (relative to the scenario's folder) in its place.
StatusOr<FedArgs> ParseFedArgs(const std::vector<std::string>& args);

// The presets' names, and one preset's flags for these settings (rounds and eval_every in
// aggregations: uploads / per_round for the algorithms that aggregate per_round uploads at a
// time).
std::vector<std::string> FedPresetNames();
StatusOr<std::vector<std::string>> FedAlgorithmFlags(const std::string& algorithm,
                                                     const FedArgs& args);

// Runs the experiment; returns the exit code (0: every run finished; 1: a run failed; 128 +
// signal when interrupted). `self` is this program (it runs `self launch` per algorithm).
int RunFed(const FedArgs& args, const std::string& self);

}  // namespace hetps
