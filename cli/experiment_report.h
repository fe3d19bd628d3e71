// What `hetps experiment` makes of its training runs: each run's outcome read from its folder
// (metrics.csv: rank 0's evaluations; summary.json: the final model's accuracy, throughput and
// the workers' traffic), and the experiment folder's results.csv (one row per run), report.md
// (per setting and algorithm, means with 95% confidence intervals over the seeds) and one plot
// per setting (accuracy against wall time and against clocks: the mean over the seeds with a
// band of its 95% confidence interval; plots/<setting>.gp beside each .png, to adjust and run
// again with gnuplot).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct TrainOutcome {
  struct Point {  // one evaluation of rank 0's model
    double wall_s = 0;
    int64_t clock = 0;
    double accuracy = 0;
  };
  std::string setting, algorithm;
  int repeat = 0;                  // 0, 1, ...
  int64_t seed = 0;                // its --data_seed
  std::string dir;                 // its run folder
  std::string eval_set = "test";   // or validation (a learning-rate sweep's runs)
  std::vector<Point> curve;        // in time order
  std::optional<Point> at_target;  // the first evaluation at or above the target
  double final_accuracy = 0;       // the model after the last clock of every worker
  double wall_s = 0, samples_per_s = 0;
  bool virtual_time = false;  // summary.json's "clock": times are virtual seconds
  int64_t partition_pushes = 0, bytes_pushed = 0, bytes_pulled = 0, dropped_pushes = 0;
  double mean_push_staleness = 0;
  double best_accuracy() const;
};

// Reads a run from its metrics.csv and summary.json texts against `target`.
StatusOr<TrainOutcome> ParseTrainOutcome(const std::string& metrics_csv,
                                         const std::string& summary_json, double target);

// A band over several runs' curves: at each x (wall seconds or clocks), the mean of the runs'
// accuracies there (each run's curve linearly interpolated, held at its last value after its
// end; a run counts from its first evaluation on) and the half-width of its 95% confidence
// interval. `points` x values from 0 to the largest x of any run.
struct BandPoint {
  double x = 0, mean = 0, ci95 = 0;
  size_t n = 0;  // runs with a value at x
};
std::vector<BandPoint> AccuracyBand(const std::vector<const TrainOutcome*>& runs, bool by_clock,
                                    int points);

struct ExperimentReportInfo {
  std::string name;   // the experiment
  std::string about;  // its description (the flag file's leading comment)
  std::string how;    // the settings every run shares, said in a sentence or two
  std::string rates;  // markdown: how each algorithm's learning rate was chosen (a sweep's table)
  double target = 0;
  std::vector<std::string> settings, algorithms;  // in the file's order
  int repeats = 0;
};

// results.csv, report.md and plots/<setting>.{gp,png} in `dir`; missing runs (not finished)
// are counted as such in the report.
Status WriteExperimentReport(const std::string& dir, const std::vector<TrainOutcome>& runs,
                             const ExperimentReportInfo& info);

}  // namespace hetps
