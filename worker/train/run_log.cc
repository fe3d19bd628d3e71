#include "worker/train/run_log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace hetps {
namespace {

// metrics.csv's columns; {} is the evaluation set (test, validation).
constexpr char kHeader[] = "wall_s,clock,worker,loss,{}_accuracy,staleness";

// The rows of `path` before `from_clock` (the clock is a row's second field).
std::string RowsBefore(const std::string& path, int64_t from_clock) {
  std::ifstream in(path);
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(','), b = a == std::string::npos ? a : line.find(',', a + 1);
    if (b == std::string::npos) continue;
    try {
      if (std::stoll(line.substr(a + 1, b - a - 1)) < from_clock) kept += line + "\n";
    } catch (const std::exception&) {
    }
  }
  return kept;
}

}  // namespace

StatusOr<RunLog> RunLog::Open(const std::string& dir, int rank, int64_t from_clock) {
  RunLog log;
  if (dir.empty()) return log;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = fmt::format("{}/worker-{}.csv", dir, rank);
  const std::string earlier = from_clock > 0 ? RowsBefore(path, from_clock) : "";
  log.file_ = std::fopen(path.c_str(), "w");
  if (log.file_ != nullptr) std::fputs(earlier.c_str(), log.file_);
  if (log.file_ == nullptr) return Status::InvalidArgument(fmt::format("cannot write {}", path));
  return log;
}

double RunLog::Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void RunLog::RecordAt(double unix_seconds, int64_t clock, int rank, double loss,
                      std::optional<double> accuracy, int64_t staleness) {
  if (file_ == nullptr) return;
  // Unix time here; FinishRun makes it relative to the run's first row.
  std::fprintf(file_, "%.3f,%lld,%d,%.5f,%s,%lld\n", unix_seconds, static_cast<long long>(clock),
               rank, loss, accuracy ? fmt::format("{:.4f}", *accuracy).c_str() : "",
               static_cast<long long>(staleness));
}

void RunLog::Close() {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

Status WriteWorkerTraffic(const std::string& dir, int rank, const WorkerTraffic& t) {
  if (dir.empty()) return Status();
  const std::string path = fmt::format("{}/worker-{}.traffic", dir, rank);
  std::ofstream out(path);
  out << fmt::format("{} {} {} {} {} {}\n", t.partition_pushes, t.bytes_pushed, t.bytes_pulled,
                     t.dropped_pushes, t.push_staleness_sum, t.max_push_staleness);
  if (!out) return Status::InvalidArgument(fmt::format("cannot write {}", path));
  return Status();
}

namespace {

// What the workers left in `dir`, taken out of it: their metrics rows (unix time, the rest of
// the row), in time order, and their traffic summed.
void GatherWorkers(const std::string& dir, std::vector<std::pair<double, std::string>>& rows,
                   WorkerTraffic& traffic, int& traffic_workers) {
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("worker-", 0) != 0) continue;
    if (entry.path().extension() == ".traffic") {
      std::ifstream in(entry.path());
      WorkerTraffic t;
      if (in >> t.partition_pushes >> t.bytes_pushed >> t.bytes_pulled >> t.dropped_pushes >>
          t.push_staleness_sum >> t.max_push_staleness) {
        traffic.partition_pushes += t.partition_pushes;
        traffic.bytes_pushed += t.bytes_pushed;
        traffic.bytes_pulled += t.bytes_pulled;
        traffic.dropped_pushes += t.dropped_pushes;
        traffic.push_staleness_sum += t.push_staleness_sum;
        traffic.max_push_staleness = std::max(traffic.max_push_staleness, t.max_push_staleness);
        ++traffic_workers;
      } else {
        spdlog::warn("skipping malformed traffic file {}", name);
      }
      fs::remove(entry.path());
      continue;
    }
    if (entry.path().extension() != ".csv") continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      // A worker killed mid-write leaves a partial last line: skip what does not parse.
      const size_t comma = line.find(',');
      if (comma == std::string::npos || std::count(line.begin(), line.end(), ',') != 5) continue;
      try {
        rows.emplace_back(std::stod(line.substr(0, comma)), line.substr(comma + 1));
      } catch (const std::exception&) {
        spdlog::warn("skipping malformed metrics row in {}: '{}'", name, line);
      }
    }
    fs::remove(entry.path());
  }
  std::sort(rows.begin(), rows.end());
}

std::string SummaryJson(const RunSummary& s, const WorkerTraffic& traffic, int traffic_workers) {
  std::string extra;  // the workload's own: its model's name and figures
  if (!s.model.empty()) extra += fmt::format(",\"model\":\"{}\"", s.model);
  if (s.virtual_time) extra += fmt::format(",\"clock\":\"virtual\",\"host_s\":{:.2f}", s.host_s);
  for (const auto& [name, value] : s.figures) extra += fmt::format(",\"{}\":{:.6f}", name, value);
  return fmt::format(
      "{{\"{}_accuracy\":{:.4f},\"eval_set\":\"{}\",\"wall_s\":{:.2f},\"iterations\":{},"
      "\"workers\":{},"
      "\"samples_per_s\":{:.1f},\"consistency\":\"{}\",\"device\":\"{}\","
      "\"device_encoded_partitions\":{},\"step_s\":{{\"pull\":{:.6f},\"push_wait\":{:.6f},"
      "\"compute\":{:.6f},\"encode\":{:.6f},\"clock\":{:.6f}}},\"traffic_workers\":{},"
      "\"partition_pushes\":{},\"bytes_pushed\":{},\"bytes_pulled\":{},\"dropped_pushes\":{},"
      "\"mean_push_staleness\":{:.4f},\"max_push_staleness\":{}{}}}\n",
      s.eval_set, s.accuracy, s.eval_set, s.wall_s, s.iterations, s.workers,
      s.wall_s > 0 ? static_cast<double>(s.samples) / s.wall_s : 0.0, s.consistency, s.device,
      s.device_encoded_partitions, s.step.pull, s.step.push_wait, s.step.compute, s.step.encode,
      s.step.clock, traffic_workers, traffic.partition_pushes, traffic.bytes_pushed,
      traffic.bytes_pulled, traffic.dropped_pushes,
      traffic.partition_pushes > 0 ? static_cast<double>(traffic.push_staleness_sum) /
                                         static_cast<double>(traffic.partition_pushes)
                                   : 0.0,
      traffic.max_push_staleness, extra);
}

void Plot(const std::string& dir, const std::string& metrics, const std::string& eval_set,
          bool virtual_time) {
  const std::string script = fmt::format(
      "set terminal pngcairo size 900,500; set output '{0}/plot.png';"
      "set datafile separator ','; set key top center; set xlabel '{3} time (s)';"
      "set ylabel 'training loss'; set y2label '{2} accuracy'; set ytics nomirror; set y2tics;"
      "plot '{1}' every ::1 using 1:4 with points pt 7 ps 0.3 title 'loss (every worker)',"
      " '' every ::1 using 1:5 axes x1y2 with linespoints lw 2 title '{2} accuracy'",
      dir, metrics, eval_set, virtual_time ? "virtual" : "wall");
  const std::string cmd = fmt::format("gnuplot -e \"{}\" 2>&1", script);
  if (std::system(cmd.c_str()) != 0) {
    spdlog::warn("no plot: gnuplot failed or is not installed (apt-get install gnuplot-nox)");
  }
}

}  // namespace

Status FinishRun(const std::string& dir, const RunSummary& s) {
  std::vector<std::pair<double, std::string>> rows;  // (unix time, rest of the row)
  WorkerTraffic traffic;
  int traffic_workers = 0;
  GatherWorkers(dir, rows, traffic, traffic_workers);
  const std::string metrics = dir + "/metrics.csv";
  {
    std::ofstream out(metrics);
    out << fmt::format(kHeader, s.eval_set) << "\n";
    const double origin = s.virtual_time || rows.empty() ? 0 : rows.front().first;
    for (const auto& [t, rest] : rows) out << fmt::format("{:.3f},{}\n", t - origin, rest);
    if (!out) return Status::InvalidArgument(fmt::format("cannot write {}", metrics));
  }
  {
    const std::string path = dir + "/summary.json";
    std::ofstream out(path);
    out << SummaryJson(s, traffic, traffic_workers);
    if (!out) return Status::InvalidArgument(fmt::format("cannot write {}", path));
  }
  Plot(dir, metrics, s.eval_set, s.virtual_time);
  return Status();
}

}  // namespace hetps
