#include "cli/experiment_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/report_stats.h"
#include "cli/run_series.h"

namespace hetps {
namespace {

// The runs of one setting and algorithm, in repeat order.
std::vector<const TrainOutcome*> Cell(const std::vector<TrainOutcome>& runs,
                                      const std::string& setting, const std::string& algorithm) {
  std::vector<const TrainOutcome*> cell;
  for (const TrainOutcome& r : runs) {
    if (r.setting == setting && r.algorithm == algorithm) cell.push_back(&r);
  }
  return cell;
}

// A figure over the runs of `cell`: `value` gives it per run (a double, or an optional that is
// empty for a run without it, e.g. the time to a target it did not reach).
template <typename F>
MeanCi Over(const std::vector<const TrainOutcome*>& cell, F value) {
  std::vector<double> v;
  for (const TrainOutcome* r : cell) {
    const std::optional<double> x = value(*r);
    if (x) v.push_back(*x);
  }
  return MeanAndCi(v);
}

std::string ResultsCsv(const std::vector<TrainOutcome>& runs) {
  std::string csv =
      "setting,algorithm,repeat,seed,time_to_target_s,clocks_to_target,final_accuracy,"
      "best_accuracy,wall_s,samples_per_s,partition_pushes,bytes_pushed,bytes_pulled,"
      "dropped_pushes,mean_push_staleness,run_dir\n";
  for (const TrainOutcome& r : runs) {
    const auto& t = r.at_target;
    csv += fmt::format("{},{},{},{},{},{},{:.4f},{:.4f},{:.2f},{:.1f},{},{},{},{},{:.4f},{}\n",
                       r.setting, r.algorithm, r.repeat + 1, r.seed,
                       t ? fmt::format("{:.3f}", t->wall_s) : "", t ? std::to_string(t->clock) : "",
                       r.final_accuracy, r.best_accuracy(), r.wall_s, r.samples_per_s,
                       r.partition_pushes, r.bytes_pushed, r.bytes_pulled, r.dropped_pushes,
                       r.mean_push_staleness, r.dir);
  }
  return csv;
}

std::string ReportMarkdown(const std::vector<TrainOutcome>& runs,
                           const ExperimentReportInfo& info) {
  std::string md = fmt::format("# Experiment {}\n\n", info.name);
  if (!info.about.empty()) md += info.about + "\n\n";
  md += info.how + "\n\n";
  if (!info.rates.empty()) md += info.rates + "\n";
  md += fmt::format(
      "Each cell is the mean ± the half-width of its 95% confidence interval (Student's t) over "
      "the runs of that algorithm and setting, one per seed ({} asked for). Time and clocks to "
      "{} are over the runs that reached it (said as k/n); a run that did not finish is not "
      "counted.\n\n",
      info.repeats, info.target);
  for (const std::string& setting : info.settings) {
    md += fmt::format("## {}\n\n", setting);
    md += fmt::format(
        "| algorithm | runs | reached {0} | time to {0} (s) | clocks to {0} | final accuracy | "
        "best accuracy | samples/s | MB pushed | mean push staleness |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n",
        info.target);
    for (const std::string& algorithm : info.algorithms) {
      const auto cell = Cell(runs, setting, algorithm);
      size_t reached = 0;
      for (const TrainOutcome* r : cell) reached += r->at_target.has_value();
      using R = const TrainOutcome&;
      const MeanCi time = Over(cell, [](R r) -> std::optional<double> {
        return r.at_target ? std::optional(r.at_target->wall_s) : std::nullopt;
      });
      const MeanCi clocks = Over(cell, [](R r) -> std::optional<double> {
        return r.at_target ? std::optional<double>(r.at_target->clock) : std::nullopt;
      });
      md += fmt::format(
          "| {} | {}/{} | {}/{} | {} | {} | {} | {} | {} | {} | {} |\n", algorithm, cell.size(),
          info.repeats, reached, cell.size(), ShowMeanCi(time, "{:.1f}"),
          ShowMeanCi(clocks, "{:.0f}"),
          ShowMeanCi(Over(cell, [](R r) { return r.final_accuracy; }), "{:.4f}"),
          ShowMeanCi(Over(cell, [](R r) { return r.best_accuracy(); }), "{:.4f}"),
          ShowMeanCi(Over(cell, [](R r) { return r.samples_per_s; }), "{:.0f}"),
          ShowMeanCi(Over(cell, [](R r) { return static_cast<double>(r.bytes_pushed) / 1e6; }),
                     "{:.1f}"),
          ShowMeanCi(Over(cell, [](R r) { return r.mean_push_staleness; }), "{:.2f}"));
    }
    md += fmt::format("\n![{0}](plots/{1}.png)\n\n", setting, DirName(setting));
  }
  md +=
      "Times are seconds from the run's first metrics row (virtual seconds from the run's "
      "start under --clock=virtual) to the first evaluation of rank 0's "
      "model at or above the target; clocks are rank 0's. The final accuracy is the model's "
      "after every worker's last clock. MB pushed is every worker's payload (after "
      "compression); push staleness is per partition push, the versions the partition had "
      "advanced since the values its gradient was computed from. results.csv has every run, "
      "each run's folder its metrics.csv, summary.json and launch.log.\n";
  return md;
}

std::string Title(std::string s) {
  for (char& c : s) c = c == '\'' || c == '_' ? ' ' : c;
  return s;
}

std::string PlotScript(const std::vector<TrainOutcome>& runs, const ExperimentReportInfo& info,
                       const std::string& setting, const std::string& png) {
  std::string gp;
  std::vector<size_t> drawn;  // the algorithms with an evaluation in this setting
  for (size_t a = 0; a < info.algorithms.size(); ++a) {
    const auto cell = Cell(runs, setting, info.algorithms[a]);
    for (const bool by_clock : {false, true}) {
      const auto band = AccuracyBand(cell, by_clock, 200);
      if (band.empty()) continue;
      if (!by_clock) drawn.push_back(a);
      gp += fmt::format("${}{} << EOD\n", by_clock ? "clocks" : "time", a);
      for (const BandPoint& p : band) {
        gp += fmt::format("{:.3f} {:.4f} {:.4f} {:.4f}\n", p.x, p.mean, p.mean - p.ci95,
                          p.mean + p.ci95);
      }
      gp += "EOD\n";
    }
  }
  gp += fmt::format(
      "set terminal pngcairo size 1200,500\nset output '{}'\nset multiplot layout 1,2 title '{}'\n"
      "set key bottom right\nset grid\nset ylabel 'test accuracy'\nset style fill transparent "
      "solid 0.2 noborder\n",
      png, Title(setting));
  if (drawn.empty()) gp += "set yrange [0:1]\nset xrange [0:1]\n";  // no run finished yet
  for (const bool by_clock : {false, true}) {
    const bool virtual_time =
        std::any_of(runs.begin(), runs.end(), [](const TrainOutcome& r) { return r.virtual_time; });
    gp += fmt::format("set xlabel '{}'\nplot ", by_clock       ? "clocks (rank 0)"
                                                : virtual_time ? "virtual time (s)"
                                                               : "wall time (s)");
    for (const size_t a : drawn) {
      const char* data = by_clock ? "clocks" : "time";
      gp += fmt::format(
          "${0}{1} using 1:3:4 with filledcurves lc {2} notitle, ${0}{1} using 1:2 with lines "
          "lw 2 lc {2} title '{3}', ",
          data, a, a + 1, Title(info.algorithms[a]));
    }
    gp += fmt::format("{} with lines dt 2 lc 'gray' title 'target'\n", info.target);
  }
  gp += "unset multiplot\n";
  return gp;
}

}  // namespace

double TrainOutcome::best_accuracy() const {
  double best = 0;
  for (const Point& p : curve) best = std::max(best, p.accuracy);
  return best;
}

StatusOr<TrainOutcome> ParseTrainOutcome(const std::string& metrics_csv,
                                         const std::string& summary_json, double target) {
  // The evaluation set names the accuracy's column: test_accuracy, or validation_accuracy.
  const std::string header = metrics_csv.substr(0, metrics_csv.find('\n'));
  const std::string eval_set =
      header.find(",validation_accuracy") != std::string::npos ? "validation" : "test";
  const std::string column = eval_set + "_accuracy";
  auto table = ReadCsvTable(metrics_csv, {"wall_s", "clock", column}, "metrics.csv");
  if (!table.ok()) return table.status();
  TrainOutcome o;
  o.eval_set = eval_set;
  for (const CsvTable::Row& row : table->rows) {
    const std::string& accuracy = table->Cell(row, column);
    if (accuracy.empty()) continue;
    try {
      o.curve.push_back({std::stod(table->Cell(row, "wall_s")),
                         std::stoll(table->Cell(row, "clock")), std::stod(accuracy)});
    } catch (const std::exception&) {
      return Status::Malformed(fmt::format("metrics.csv line {}: not a number", row.line));
    }
  }
  std::stable_sort(o.curve.begin(), o.curve.end(),
                   [](const auto& a, const auto& b) { return a.wall_s < b.wall_s; });
  for (const auto& p : o.curve) {
    if (p.accuracy >= target) {
      o.at_target = p;
      break;
    }
  }
  const auto summary = nlohmann::json::parse(summary_json, nullptr, /*allow_exceptions=*/false);
  if (!summary.is_object()) return Status::Malformed("summary.json is not a JSON object");
  try {
    if (summary.value("eval_set", std::string("test")) != eval_set) {
      return Status::Malformed(
          fmt::format("summary.json is not of the {} set metrics.csv holds", eval_set));
    }
    o.final_accuracy = summary.at(column).get<double>();
    o.wall_s = summary.at("wall_s").get<double>();
    o.virtual_time = summary.value("clock", std::string("wall")) == "virtual";
    o.samples_per_s = summary.at("samples_per_s").get<double>();
    // The traffic is absent from runs whose workers wrote none (older runs).
    o.partition_pushes = summary.value("partition_pushes", int64_t{0});
    o.bytes_pushed = summary.value("bytes_pushed", int64_t{0});
    o.bytes_pulled = summary.value("bytes_pulled", int64_t{0});
    o.dropped_pushes = summary.value("dropped_pushes", int64_t{0});
    o.mean_push_staleness = summary.value("mean_push_staleness", 0.0);
  } catch (const nlohmann::json::exception& e) {
    return Status::Malformed(fmt::format("summary.json: {}", e.what()));
  }
  return o;
}

std::vector<BandPoint> AccuracyBand(const std::vector<const TrainOutcome*>& runs, bool by_clock,
                                    int points) {
  auto x_of = [by_clock](const TrainOutcome::Point& p) {
    return by_clock ? static_cast<double>(p.clock) : p.wall_s;
  };
  double end = 0;
  for (const TrainOutcome* r : runs) {
    for (const auto& p : r->curve) end = std::max(end, x_of(p));
  }
  std::vector<BandPoint> band;
  if (end <= 0 || points < 2) return band;
  std::vector<std::vector<TrainOutcome::Point>> curves;
  for (const TrainOutcome* r : runs) {
    if (r->curve.empty()) continue;
    curves.push_back(r->curve);
    std::stable_sort(curves.back().begin(), curves.back().end(),
                     [&](const auto& a, const auto& b) { return x_of(a) < x_of(b); });
  }
  for (int i = 0; i < points; ++i) {
    const double x = end * i / (points - 1);
    std::vector<double> values;
    for (const auto& c : curves) {
      if (x < x_of(c.front())) continue;
      const auto after =
          std::find_if(c.begin(), c.end(), [&](const auto& p) { return x_of(p) > x; });
      if (after == c.end()) {
        values.push_back(c.back().accuracy);
        continue;
      }
      const auto& b = *after;
      const auto& a = *(after - 1);
      const double span = x_of(b) - x_of(a);
      values.push_back(span > 0 ? a.accuracy + (b.accuracy - a.accuracy) * (x - x_of(a)) / span
                                : b.accuracy);
    }
    if (values.empty()) continue;
    const MeanCi m = MeanAndCi(values);
    band.push_back({x, m.mean, m.ci95, m.n});
  }
  return band;
}

Status WriteExperimentReport(const std::string& dir, const std::vector<TrainOutcome>& runs,
                             const ExperimentReportInfo& info) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir + "/plots", ec);
  std::map<std::string, std::string> files = {{"results.csv", ResultsCsv(runs)},
                                              {"report.md", ReportMarkdown(runs, info)}};
  for (const std::string& setting : info.settings) {
    const std::string base = "plots/" + DirName(setting);
    files[base + ".gp"] = PlotScript(runs, info, setting, dir + "/" + base + ".png");
  }
  for (const auto& [name, text] : files) {
    std::ofstream out(dir + "/" + name);
    out << text;
    if (!out) return Status::Internal(fmt::format("cannot write {}/{}", dir, name));
  }
  for (const std::string& setting : info.settings) {
    const std::string cmd = fmt::format("gnuplot '{}/plots/{}.gp' 2>&1", dir, DirName(setting));
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr,
                   "hetps experiment: no plot for %s: gnuplot failed or is not installed "
                   "(apt-get install gnuplot-nox)\n",
                   setting.c_str());
    }
  }
  return Status();
}

}  // namespace hetps
