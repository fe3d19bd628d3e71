// FedRoundsLog: what federated training reports about itself (scheduler/fed_rounds.h): the
// rounds log (rounds.csv, one row per aggregation applied on every server, held back while an
// evaluator may still measure it), the evaluators' measurements, the bytes the clients moved
// and the uploads kept and dropped. The rows and points it holds are the durable state's own
// messages (proto::FedRowState, FedPointState), saved and restored as they are.
//
// Thread-safety: none; owned by FedRounds.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "durable.pb.h"
#include "hetps.pb.h"

namespace hetps {

class FedRoundsLog {
 public:
  // `csv_path`: rounds.csv (empty: no rows are kept).
  // virtual_time: the times passed in are virtual (scheduler/virtual_clock.h); rows then carry
  // the host's seconds as well (column host_s).
  FedRoundsLog(std::string csv_path, bool virtual_time)
      : csv_path_(std::move(csv_path)), virtual_time_(virtual_time) {}
  ~FedRoundsLog();  // writes every held row
  FedRoundsLog(const FedRoundsLog&) = delete;
  FedRoundsLog& operator=(const FedRoundsLog&) = delete;

  // The first round opened or task was granted at `now` (wall times count from it).
  void Start(double now) {
    if (started_ >= 0) return;
    started_ = now;
    host_start_ = std::chrono::steady_clock::now();
  }
  void AddBytes(int64_t up, int64_t down) {
    bytes_up_ += up;
    bytes_down_ += down;
  }
  // An upload of client `rank` asked for and not used (goes on the next row).
  void Dropped(int rank);
  // Aggregation `aggregation` was applied everywhere: `kept` (ranks) with each one's
  // staleness; `late` of them (the last) came after their own round closed. Its row is held
  // until Flush (an evaluator may be told to measure it first).
  // `epsilon`: --dp's spent once it was applied (scheduler/fed_privacy.h); `clip`: adaptive
  // clipping's norm of its round.
  void Applied(int64_t aggregation, const std::vector<int>& kept,
               const std::vector<int64_t>& staleness, size_t late, double now,
               std::optional<double> epsilon = std::nullopt,
               std::optional<double> clip = std::nullopt);
  // An evaluator's measurement after aggregation e.round().
  void Measured(const proto::Evaluation& e);
  // Evaluator `worker` may still report a measurement of aggregation `from` or later; rows from
  // it on are held until it does (Unwatched: it no longer will; writes what it held).
  void Measuring(int32_t worker, int64_t from) { measuring_[worker] = from; }
  void Unwatched(int32_t worker);
  // Writes the rows no evaluator may still measure.
  void Flush() { WriteRows(/*all=*/false); }

  void Save(proto::FedRoundsState& s) const;
  // `at`: a time of the saving scheduler as a time of this one; `down`: seconds it was down
  // (they count in wall times). The log is appended to, after the rows it already holds.
  void Restore(const proto::FedRoundsState& s, const std::function<double(double)>& at,
               double down);

  int64_t bytes_up() const { return bytes_up_; }
  int64_t bytes_down() const { return bytes_down_; }
  int64_t kept_total() const { return kept_total_; }
  int64_t dropped_total() const { return dropped_total_; }
  // The evaluators' latest 500 measurements.
  const std::deque<proto::FedPointState>& measured() const { return measured_; }

 private:
  // Writes the held rows no evaluator may still measure (all: every held row).
  void WriteRows(bool all);
  bool OpenCsv();

  const std::string csv_path_;
  const bool virtual_time_;
  std::chrono::steady_clock::time_point host_start_;
  std::FILE* csv_ = nullptr;  // opened at the first row
  bool csv_failed_ = false;
  bool csv_append_ = false;                    // a restored run appends
  int64_t written_ = 0;                        // the last aggregation written
  std::deque<proto::FedRowState> rows_;        // applied, not yet written (only with a CSV path)
  std::vector<int> dropped_;                   // ranks of the uploads dropped since the last row
  std::map<int32_t, int64_t> measuring_;       // per evaluator: the first aggregation it may report
  std::deque<proto::FedPointState> measured_;  // the evaluators' measurements, the latest 500
  std::deque<proto::FedPointState> applied_;   // the latest 4096 aggregations (no accuracy)
  int64_t bytes_up_ = 0, bytes_down_ = 0;      // every client's, as reported
  int64_t kept_total_ = 0, dropped_total_ = 0;
  double started_ = -1;  // when the first round opened or task was granted
};

}  // namespace hetps
