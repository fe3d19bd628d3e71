#include "cli/fed_report.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace hetps {
namespace {

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.push_back("");
  return cells;
}

std::string Mb(int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / 1e6); }

nlohmann::json OrNull(bool has, double v) { return has ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

StatusOr<FedOutcome> ParseFedOutcome(const std::string& text, double target) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return Status::NotFound("the rounds log is empty");
  std::map<std::string, size_t> column;
  const std::vector<std::string> header = SplitCsv(line);
  for (size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  for (const char* name : {"aggregation", "wall_s", "kept", "dropped", "staleness_mean", "bytes_up",
                           "bytes_down", "test_accuracy"}) {
    if (!column.contains(name)) {
      return Status::Malformed(fmt::format("the rounds log has no column '{}'", name));
    }
  }
  FedOutcome o;
  double staleness_sum = 0;
  int number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const std::vector<std::string> cells = SplitCsv(line);
    if (cells.size() != header.size()) {
      return Status::Malformed(fmt::format("rounds log line {}: {} cells, the header has {}",
                                           number, cells.size(), header.size()));
    }
    auto cell = [&](const char* name) { return cells[column.at(name)]; };
    try {
      const int64_t kept = std::stoll(cell("kept"));
      o.aggregations = std::stoll(cell("aggregation"));
      o.wall_s = std::stod(cell("wall_s"));
      o.kept += kept;
      o.dropped += std::stoll(cell("dropped"));
      o.bytes_up = std::stoll(cell("bytes_up"));
      o.bytes_down = std::stoll(cell("bytes_down"));
      staleness_sum += std::stod(cell("staleness_mean")) * static_cast<double>(kept);
      if (!cell("test_accuracy").empty()) {
        const FedOutcome::Point p{o.aggregations, o.wall_s, o.bytes_up,
                                  std::stod(cell("test_accuracy"))};
        o.curve.push_back(p);
        if (!o.at_target && p.accuracy >= target) o.at_target = p;
      }
    } catch (const std::exception&) {
      return Status::Malformed(
          fmt::format("rounds log line {}: not a number in '{}'", number, line));
    }
  }
  if (o.kept > 0) o.mean_staleness = staleness_sum / static_cast<double>(o.kept);
  return o;
}

std::string FedReportMarkdown(const std::vector<FedOutcome>& runs, double target,
                              const std::string& how) {
  std::string md = "# Federated runs\n\n" + how + "\n\n";
  md += fmt::format(
      "| algorithm | time to {0} (s) | uplink MB to {0} | aggregations to {0} | final accuracy "
      "| best | aggregations | wall (s) | uplink MB | downlink MB | kept/asked | mean staleness "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      target);
  for (const FedOutcome& r : runs) {
    double best = 0;
    for (const auto& p : r.curve) best = std::max(best, p.accuracy);
    const auto& t = r.at_target;
    md +=
        fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.1f} | {} | {} | {:.2f} | {:.2f} |\n",
                    r.name, t ? fmt::format("{:.1f}", t->wall_s) : "not reached",
                    t ? Mb(t->bytes_up) : "-", t ? std::to_string(t->aggregation) : "-",
                    r.final_accuracy() ? fmt::format("{:.4f}", *r.final_accuracy()) : "-",
                    r.curve.empty() ? "-" : fmt::format("{:.4f}", best), r.aggregations, r.wall_s,
                    Mb(r.bytes_up), Mb(r.bytes_down), r.effective_update_ratio(), r.mean_staleness);
  }
  md +=
      "\nTimes are seconds from the first round's opening (or first task) to the aggregation "
      "the evaluator first measured at or above the target; uplink and downlink are the payload "
      "bytes every client reported (dropped uploads included); kept/asked is the share of the "
      "uploads asked for that an aggregation used (the effective update ratio); staleness is "
      "per kept upload, the aggregations applied between its client's pull and its own. Each "
      "run's folder has rounds.csv, clients.csv, metrics.csv and launch.log.\n";
  return md;
}

std::string FedSummaryJson(const std::vector<FedOutcome>& runs, double target) {
  nlohmann::json all = nlohmann::json::array();
  for (const FedOutcome& r : runs) {
    const auto& t = r.at_target;
    all.push_back(
        {{"algorithm", r.name},
         {"run_dir", r.dir},
         {"time_to_target_s", OrNull(t.has_value(), t ? t->wall_s : 0)},
         {"uplink_bytes_to_target", t ? nlohmann::json(t->bytes_up) : nlohmann::json()},
         {"aggregations_to_target", t ? nlohmann::json(t->aggregation) : nlohmann::json()},
         {"final_accuracy", OrNull(r.final_accuracy().has_value(), r.final_accuracy().value_or(0))},
         {"aggregations", r.aggregations},
         {"wall_s", r.wall_s},
         {"uplink_bytes", r.bytes_up},
         {"downlink_bytes", r.bytes_down},
         {"kept", r.kept},
         {"dropped", r.dropped},
         {"effective_update_ratio", r.effective_update_ratio()},
         {"mean_staleness", r.mean_staleness}});
  }
  return nlohmann::json{{"target", target}, {"runs", all}}.dump(2) + "\n";
}

std::string FedPlotScript(const std::vector<FedOutcome>& runs, double target,
                          const std::string& png) {
  std::string gp;
  for (size_t i = 0; i < runs.size(); ++i) {
    gp += fmt::format("$run{} << EOD\n", i);
    for (const auto& p : runs[i].curve) {
      gp += fmt::format("{:.3f} {:.4f} {:.4f}\n", p.wall_s, static_cast<double>(p.bytes_up) / 1e6,
                        p.accuracy);
    }
    gp += "EOD\n";
  }
  gp += fmt::format(
      "set terminal pngcairo size 1200,500\nset output '{}'\nset multiplot layout 1,2\n"
      "set key bottom right\nset grid\nset ylabel 'test accuracy'\n",
      png);
  for (const auto& [x, label] : {std::pair{1, "wall time (s)"}, std::pair{2, "uplink MB"}}) {
    gp += fmt::format("set xlabel '{}'\nplot ", label);
    for (size_t i = 0; i < runs.size(); ++i) {
      std::string title = runs[i].name;
      for (char& c : title) c = c == '\'' || c == '_' ? ' ' : c;
      gp += fmt::format("$run{} using {}:3 with linespoints pt 7 ps 0.5 title '{}', ", i, x, title);
    }
    gp += fmt::format("{} with lines dt 2 lc 'gray' title 'target'\n", target);
  }
  gp += "unset multiplot\n";
  return gp;
}

Status WriteFedReport(const std::string& dir, const std::vector<FedOutcome>& runs, double target,
                      const std::string& how) {
  const std::map<std::string, std::string> files = {
      {"report.md", FedReportMarkdown(runs, target, how)},
      {"summary.json", FedSummaryJson(runs, target)},
      {"plot.gp", FedPlotScript(runs, target, dir + "/plot.png")}};
  for (const auto& [name, text] : files) {
    std::ofstream out(dir + "/" + name);
    out << text;
    if (!out) return Status::Internal(fmt::format("cannot write {}/{}", dir, name));
  }
  const std::string cmd = fmt::format("gnuplot '{}/plot.gp' 2>&1", dir);
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr,
                 "hetps fed: no plot.png: gnuplot failed or is not installed "
                 "(apt-get install gnuplot-nox)\n");
  }
  return Status();
}

}  // namespace hetps
