#include "cli/fed_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace hetps {
namespace {

nlohmann::json OrNull(bool has, double v) { return has ? nlohmann::json(v) : nlohmann::json(); }

// The algorithms in order of first appearance, each with its runs.
std::vector<std::pair<std::string, std::vector<const FedOutcome*>>> ByAlgorithm(
    const std::vector<FedOutcome>& runs) {
  std::vector<std::pair<std::string, std::vector<const FedOutcome*>>> groups;
  for (const FedOutcome& r : runs) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == r.name; });
    if (it == groups.end()) it = groups.insert(groups.end(), {r.name, {}});
    it->second.push_back(&r);
  }
  return groups;
}

struct AlgorithmStats {
  MeanCi time, uplink, aggregations, final_accuracy, wall, uplink_all, ratio, staleness, epsilon;
  size_t runs = 0, reached = 0;
};
AlgorithmStats Stats(const std::vector<const FedOutcome*>& runs) {
  std::vector<double> time, uplink, aggregations, final_accuracy, wall, uplink_all, ratio,
      staleness, epsilon;
  AlgorithmStats s;
  s.runs = runs.size();
  for (const FedOutcome* r : runs) {
    if (r->at_target) {
      ++s.reached;
      time.push_back(r->at_target->wall_s);
      uplink.push_back(static_cast<double>(r->at_target->bytes_up) / 1e6);
      aggregations.push_back(static_cast<double>(r->at_target->aggregation));
    }
    if (r->final_accuracy()) final_accuracy.push_back(*r->final_accuracy());
    wall.push_back(r->wall_s);
    uplink_all.push_back(static_cast<double>(r->bytes_up) / 1e6);
    ratio.push_back(r->effective_update_ratio());
    staleness.push_back(r->mean_staleness);
    if (r->epsilon) epsilon.push_back(*r->epsilon);
  }
  s.epsilon = MeanAndCi(epsilon);
  s.time = MeanAndCi(time);
  s.uplink = MeanAndCi(uplink);
  s.aggregations = MeanAndCi(aggregations);
  s.final_accuracy = MeanAndCi(final_accuracy);
  s.wall = MeanAndCi(wall);
  s.uplink_all = MeanAndCi(uplink_all);
  s.ratio = MeanAndCi(ratio);
  s.staleness = MeanAndCi(staleness);
  return s;
}

nlohmann::json Json(const MeanCi& m) {
  if (m.n == 0) return nullptr;
  return {{"mean", m.mean}, {"ci95", m.ci95}, {"n", m.n}};
}

// --dp: the epsilon each algorithm's runs spent (rounds.csv's last row), or nothing.
std::string PrivacyLines(const std::vector<FedOutcome>& runs) {
  std::string md;
  for (const auto& [name, group] : ByAlgorithm(runs)) {
    const AlgorithmStats st = Stats(group);
    if (st.epsilon.n == 0) continue;
    md += fmt::format("{}- {}: epsilon {} spent (at --dp's delta)\n", md.empty() ? "\n" : "", name,
                      ShowMeanCi(st.epsilon, "{:.3f}"));
  }
  return md.empty() ? md : "\nDifferential privacy (--dp, rounds.csv's epsilon):" + md;
}

}  // namespace

StatusOr<FedOutcome> ParseFedOutcome(const std::string& text, double target) {
  auto table = ReadCsvTable(text,
                            {"aggregation", "wall_s", "kept", "dropped", "staleness_mean",
                             "bytes_up", "bytes_down", "test_accuracy"},
                            "the rounds log");
  if (!table.ok()) return table.status();
  FedOutcome o;
  double staleness_sum = 0;
  for (const CsvTable::Row& row : table->rows) {
    auto cell = [&](const char* name) { return table->Cell(row, name); };
    try {
      const int64_t kept = std::stoll(cell("kept"));
      o.aggregations = std::stoll(cell("aggregation"));
      o.wall_s = std::stod(cell("wall_s"));
      o.kept += kept;
      o.dropped += std::stoll(cell("dropped"));
      if (table->column.contains("late")) o.late += std::stoll(cell("late"));  // older logs: none
      if (table->column.contains("host_s") && !cell("host_s").empty()) {
        o.host_s = std::stod(cell("host_s"));
      }
      if (table->column.contains("epsilon") && !cell("epsilon").empty()) {
        o.epsilon = std::stod(cell("epsilon"));
      }
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
      return Status::Malformed(fmt::format("rounds log line {}: not a number in '{}'", row.line,
                                           fmt::join(row.cells, ",")));
    }
  }
  if (o.kept > 0) o.mean_staleness = staleness_sum / static_cast<double>(o.kept);
  return o;
}

std::string FedReportMarkdown(const std::vector<FedOutcome>& runs, double target,
                              const std::string& how) {
  std::string md = "# Federated runs\n\n" + how + "\n\n";
  const auto groups = ByAlgorithm(runs);
  const bool repeats = groups.size() < runs.size();
  if (repeats) {
    md += fmt::format(
        "Per algorithm, the mean ± the half-width of its 95% confidence interval over its runs "
        "(time, uplink and aggregations to {0} over the runs that reached it).\n\n"
        "| algorithm | reached {0} | time to {0} (s) | uplink MB to {0} | aggregations to {0} | "
        "final accuracy | wall (s) | uplink MB | kept/asked | mean staleness |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n",
        target);
    for (const auto& [name, group] : groups) {
      const AlgorithmStats st = Stats(group);
      md += fmt::format("| {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} |\n", name,
                        st.reached, st.runs, ShowMeanCi(st.time, "{:.1f}"),
                        ShowMeanCi(st.uplink, "{:.1f}"), ShowMeanCi(st.aggregations, "{:.1f}"),
                        ShowMeanCi(st.final_accuracy, "{:.4f}"), ShowMeanCi(st.wall, "{:.1f}"),
                        ShowMeanCi(st.uplink_all, "{:.1f}"), ShowMeanCi(st.ratio, "{:.2f}"),
                        ShowMeanCi(st.staleness, "{:.2f}"));
    }
    md += "\nEvery run:\n\n";
  }
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
                    repeats ? fmt::format("{} #{}", r.name, r.repeat + 1) : r.name,
                    t ? fmt::format("{:.1f}", t->wall_s) : "not reached", t ? Mb(t->bytes_up) : "-",
                    t ? std::to_string(t->aggregation) : "-",
                    r.final_accuracy() ? fmt::format("{:.4f}", *r.final_accuracy()) : "-",
                    r.curve.empty() ? "-" : fmt::format("{:.4f}", best), r.aggregations, r.wall_s,
                    Mb(r.bytes_up), Mb(r.bytes_down), r.effective_update_ratio(), r.mean_staleness);
  }
  if (std::any_of(runs.begin(), runs.end(), [](const FedOutcome& r) { return r.host_s > 0; })) {
    double host = 0;
    for (const FedOutcome& r : runs) host += r.host_s;
    md += fmt::format(
        "\nEvery time is virtual (--clock=virtual: the clients' device and link models, "
        "docs/virtual-time.md); the runs took {:.1f} s of the host's time to their last "
        "aggregation.\n",
        host);
  }
  md += PrivacyLines(runs);
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
         {"repeat", r.repeat},
         {"run_dir", r.dir},
         {"time_to_target_s", OrNull(t.has_value(), t ? t->wall_s : 0)},
         {"uplink_bytes_to_target", t ? nlohmann::json(t->bytes_up) : nlohmann::json()},
         {"aggregations_to_target", t ? nlohmann::json(t->aggregation) : nlohmann::json()},
         {"final_accuracy", OrNull(r.final_accuracy().has_value(), r.final_accuracy().value_or(0))},
         {"aggregations", r.aggregations},
         {"wall_s", r.wall_s},
         {"clock", r.host_s > 0 ? "virtual" : "wall"},
         {"host_s", r.host_s > 0 ? nlohmann::json(r.host_s) : nlohmann::json()},
         {"uplink_bytes", r.bytes_up},
         {"downlink_bytes", r.bytes_down},
         {"kept", r.kept},
         {"dropped", r.dropped},
         {"effective_update_ratio", r.effective_update_ratio()},
         {"mean_staleness", r.mean_staleness},
         {"epsilon", r.epsilon ? nlohmann::json(*r.epsilon) : nlohmann::json()}});
  }
  nlohmann::json algorithms = nlohmann::json::array();
  for (const auto& [name, group] : ByAlgorithm(runs)) {
    const AlgorithmStats st = Stats(group);
    algorithms.push_back({{"algorithm", name},
                          {"runs", st.runs},
                          {"reached", st.reached},
                          {"time_to_target_s", Json(st.time)},
                          {"uplink_mb_to_target", Json(st.uplink)},
                          {"aggregations_to_target", Json(st.aggregations)},
                          {"final_accuracy", Json(st.final_accuracy)},
                          {"wall_s", Json(st.wall)},
                          {"uplink_mb", Json(st.uplink_all)},
                          {"effective_update_ratio", Json(st.ratio)},
                          {"mean_staleness", Json(st.staleness)},
                          {"epsilon", Json(st.epsilon)}});
  }
  return nlohmann::json{{"target", target}, {"algorithms", algorithms}, {"runs", all}}.dump(2) +
         "\n";
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
  const bool virtual_time =
      std::any_of(runs.begin(), runs.end(), [](const FedOutcome& r) { return r.host_s > 0; });
  for (const auto& [x, label] : {std::pair{1, virtual_time ? "virtual time (s)" : "wall time (s)"},
                                 std::pair{2, "uplink MB"}}) {
    gp += fmt::format("set xlabel '{}'\nplot ", label);
    const auto groups = ByAlgorithm(runs);
    for (size_t i = 0; i < runs.size(); ++i) {
      std::string title = runs[i].name;
      for (char& c : title) c = c == '\'' || c == '_' ? ' ' : c;
      const size_t colour =
          static_cast<size_t>(std::find_if(groups.begin(), groups.end(),
                                           [&](const auto& g) { return g.first == runs[i].name; }) -
                              groups.begin());
      const bool first = groups[colour].second.front() == &runs[i];
      gp += fmt::format("$run{} using {}:3 with linespoints lc {} pt 7 ps 0.5 {}, ", i, x,
                        colour + 1, first ? "title '" + title + "'" : "notitle");
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
