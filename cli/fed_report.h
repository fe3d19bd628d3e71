// What `hetps fed` makes of federated runs: each run's outcome read from the scheduler's rounds
// log (scheduler/fed_rounds.h: one row per aggregation, the evaluator's accuracy on the rows it
// measured), and the run folder's report.md, summary.json and plot.png (plot.gp beside it, to
// adjust and run again with gnuplot) for one algorithm or several over the same scenario.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/report_stats.h"
#include "common/status.h"

namespace hetps {

struct FedOutcome {
  struct Point {  // one measured aggregation
    int64_t aggregation = 0;
    double wall_s = 0;
    int64_t bytes_up = 0;
    double accuracy = 0;
  };
  std::string name;  // the algorithm as given
  std::string dir;   // its run folder
  int repeat = 0;    // which repeat of the algorithm (0, 1, ...)
  int64_t aggregations = 0;
  double wall_s = 0;  // when the last aggregation was applied (virtual seconds: see host_s)
  // --clock=virtual: every time here is virtual (rounds.csv's wall_s) and this is the host's
  // seconds to the last aggregation (its host_s); 0 under wall time.
  double host_s = 0;
  int64_t kept = 0, dropped = 0;
  int64_t late = 0;  // kept uploads that came late: each was dropped from its own round first
  int64_t bytes_up = 0, bytes_down = 0;  // every client's payload, to the last aggregation
  double mean_staleness = 0;             // over the kept uploads
  std::optional<double> epsilon;         // --dp: the epsilon spent (the last row's)
  std::vector<Point> curve;
  // The first measurement at or above the target, if any.
  std::optional<Point> at_target;
  std::optional<double> final_accuracy() const {
    return curve.empty() ? std::nullopt : std::optional<double>(curve.back().accuracy);
  }
  // Kept uploads over every upload asked for (kept + dropped, a late one counted once):
  // FedLesScan's effective update ratio.
  double effective_update_ratio() const {
    const int64_t asked = kept + dropped - late;
    return asked > 0 ? static_cast<double>(kept) / static_cast<double>(asked) : 0.0;
  }
};

// Reads a rounds log (`text`: the CSV's contents) against `target` accuracy.
StatusOr<FedOutcome> ParseFedOutcome(const std::string& text, double target);

// report.md: the scenario and the table (time, uplink MB and aggregations to the target, final
// accuracy, totals, kept/asked, staleness) per run; with repeats (several runs of one name)
// first a table per algorithm of means with 95% confidence intervals over its runs (time and
// bytes to the target over the runs that reached it, said as k/n). `how` says how the runs were
// made.
std::string FedReportMarkdown(const std::vector<FedOutcome>& runs, double target,
                              const std::string& how);
// summary.json: the same figures, machine-readable (null where the target was not reached),
// per run and per algorithm (mean, ci95, n).
std::string FedSummaryJson(const std::vector<FedOutcome>& runs, double target);
// A gnuplot script that draws test accuracy against wall time and against uplink MB, one line
// per run, one colour per algorithm, into `png`; the data is inside the script.
std::string FedPlotScript(const std::vector<FedOutcome>& runs, double target,
                          const std::string& png);

// Writes report.md, summary.json, plot.gp and plot.png (gnuplot; a warning when it is missing)
// into `dir`.
Status WriteFedReport(const std::string& dir, const std::vector<FedOutcome>& runs, double target,
                      const std::string& how);

}  // namespace hetps
