#include "scheduler/fed_rounds_log.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

namespace hetps {
namespace {

// Rows the scheduler keeps of the aggregations applied: enough for the evaluators that lag.
constexpr size_t kAppliedKept = 64;
constexpr size_t kMeasuredShown = 500;
constexpr size_t kAppliedShown = 4096;

// The aggregation on the last line of the rounds log at `path` (0: none, or no log).
int64_t LastLoggedAggregation(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  if (last.empty()) return 0;
  try {
    return std::stoll(last.substr(0, last.find(',')));
  } catch (const std::exception&) {
    return 0;
  }
}

proto::FedPointState Point(int64_t aggregation, double wall_s, double accuracy, int64_t bytes_up) {
  proto::FedPointState p;
  p.set_aggregation(aggregation);
  p.set_wall_s(wall_s);
  p.set_accuracy(accuracy);
  p.set_bytes_up(bytes_up);
  return p;
}

void WriteRow(std::FILE* csv, const proto::FedRowState& r) {
  double mean = 0;
  int64_t max = 0;
  for (int64_t st : r.staleness()) {
    mean += static_cast<double>(st) / static_cast<double>(r.staleness_size());
    max = std::max(max, st);
  }
  std::fprintf(csv, "%lld,%.3f,%d,%d,%.2f,%lld,%lld,%lld,%s,%s,%s,%s,%lld,%s,%s,%s\n",
               static_cast<long long>(r.aggregation()), r.wall_s(), r.kept_size(), r.dropped_size(),
               mean, static_cast<long long>(max), static_cast<long long>(r.bytes_up()),
               static_cast<long long>(r.bytes_down()),
               r.measured() ? fmt::format("{:.4f}", r.loss()).c_str() : "",
               r.measured() ? fmt::format("{:.4f}", r.accuracy()).c_str() : "",
               fmt::format("{}", fmt::join(r.kept(), " ")).c_str(),
               fmt::format("{}", fmt::join(r.dropped(), " ")).c_str(),
               static_cast<long long>(r.late()),
               r.host_s() > 0 ? fmt::format("{:.3f}", r.host_s()).c_str() : "",
               r.has_epsilon() ? fmt::format("{:.4f}", r.epsilon()).c_str() : "",
               r.has_clip() ? fmt::format("{:.6g}", r.clip()).c_str() : "");
}

}  // namespace

FedRoundsLog::~FedRoundsLog() {
  WriteRows(/*all=*/true);
  if (csv_ != nullptr) std::fclose(csv_);
}

void FedRoundsLog::Dropped(int rank) {
  dropped_.push_back(rank);
  ++dropped_total_;
}

void FedRoundsLog::Applied(int64_t aggregation, const std::vector<int>& kept,
                           const std::vector<int64_t>& staleness, size_t late, double now,
                           std::optional<double> epsilon, std::optional<double> clip) {
  const double wall_s = now - std::max(0.0, started_);
  applied_.push_back(Point(aggregation, wall_s, 0, bytes_up_));
  if (applied_.size() > kAppliedShown) applied_.pop_front();
  kept_total_ += static_cast<int64_t>(kept.size());
  if (!csv_path_.empty() && !csv_failed_) {
    proto::FedRowState& row = rows_.emplace_back();
    row.set_aggregation(aggregation);
    row.set_wall_s(wall_s);
    if (epsilon) row.set_epsilon(*epsilon);
    if (clip) row.set_clip(*clip);
    if (virtual_time_) {
      row.set_host_s(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start_).count());
    }
    row.set_bytes_up(bytes_up_);
    row.set_bytes_down(bytes_down_);
    row.mutable_kept()->Add(kept.begin(), kept.end());
    row.mutable_staleness()->Add(staleness.begin(), staleness.end());
    row.mutable_dropped()->Add(dropped_.begin(), dropped_.end());
    row.set_late(static_cast<int64_t>(late));
  }
  dropped_.clear();
}

void FedRoundsLog::Measured(const proto::Evaluation& e) {
  for (proto::FedRowState& row : rows_) {
    if (row.aggregation() != e.round() || row.measured()) continue;
    row.set_measured(true);
    row.set_loss(e.loss());
    row.set_accuracy(e.accuracy());
  }
  const auto at = std::find_if(applied_.begin(), applied_.end(),
                               [&](const auto& p) { return p.aggregation() == e.round(); });
  if (at != applied_.end() && (measured_.empty() || e.round() > measured_.back().aggregation())) {
    measured_.push_back(Point(e.round(), at->wall_s(), e.accuracy(), at->bytes_up()));
    if (measured_.size() > kMeasuredShown) measured_.pop_front();
  }
}

void FedRoundsLog::Unwatched(int32_t worker) {
  if (measuring_.erase(worker) > 0) WriteRows(/*all=*/false);
}

bool FedRoundsLog::OpenCsv() {
  if (csv_ != nullptr) return true;
  if (csv_failed_) return false;
  // A restored run goes on with the log its previous scheduler wrote.
  const bool append = csv_append_ && std::filesystem::exists(csv_path_);
  csv_ = std::fopen(csv_path_.c_str(), append ? "a" : "w");
  if (csv_ == nullptr) {
    spdlog::error("cannot write the rounds log {}", csv_path_);
    csv_failed_ = true;
    return false;
  }
  if (!append) {
    std::fprintf(
        csv_,
        "aggregation,wall_s,kept,dropped,staleness_mean,staleness_max,bytes_up,"
        "bytes_down,test_loss,test_accuracy,kept_ranks,dropped_ranks,late,host_s,epsilon,clip\n");
  }
  return true;
}

void FedRoundsLog::WriteRows(bool all) {
  int64_t held_from = std::numeric_limits<int64_t>::max();
  for (const auto& [id, from] : measuring_) held_from = std::min(held_from, from);
  while (!rows_.empty() && (all || rows_.front().aggregation() < held_from)) {
    const proto::FedRowState& r = rows_.front();
    if (OpenCsv() && r.aggregation() > written_) {
      written_ = r.aggregation();
      WriteRow(csv_, r);
    }
    rows_.pop_front();
  }
  if (csv_ != nullptr) std::fflush(csv_);
}

void FedRoundsLog::Save(proto::FedRoundsState& s) const {
  s.set_bytes_up(bytes_up_);
  s.set_bytes_down(bytes_down_);
  s.set_kept_total(kept_total_);
  s.set_dropped_total(dropped_total_);
  s.set_started_at_s(started_);
  s.mutable_dropped()->Add(dropped_.begin(), dropped_.end());
  for (const proto::FedRowState& r : rows_) *s.add_rows() = r;
  for (const auto& [worker, from] : measuring_) (*s.mutable_measuring())[worker] = from;
  for (const proto::FedPointState& p : measured_) *s.add_measured() = p;
  const size_t skip = applied_.size() > kAppliedKept ? applied_.size() - kAppliedKept : 0;
  for (size_t i = skip; i < applied_.size(); ++i) *s.add_applied() = applied_[i];
}

void FedRoundsLog::Restore(const proto::FedRoundsState& s, const std::function<double(double)>& at,
                           double down) {
  bytes_up_ = s.bytes_up();
  bytes_down_ = s.bytes_down();
  kept_total_ = s.kept_total();
  dropped_total_ = s.dropped_total();
  started_ = s.started_at_s() < 0 ? -1 : at(s.started_at_s()) - down;
  dropped_ = {s.dropped().begin(), s.dropped().end()};
  rows_ = {s.rows().begin(), s.rows().end()};
  measuring_ = {s.measuring().begin(), s.measuring().end()};
  measured_ = {s.measured().begin(), s.measured().end()};
  applied_ = {s.applied().begin(), s.applied().end()};
  if (!csv_path_.empty()) {
    csv_append_ = true;
    written_ = LastLoggedAggregation(csv_path_);
  }
}

}  // namespace hetps
