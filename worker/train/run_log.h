// A training run's folder: each worker appends its rows to <dir>/worker-<rank>.csv while it
// trains; after the final barrier rank 0 merges them into metrics.csv (wall time from the run's
// first row; under virtual time the virtual seconds from the start), writes summary.json and
// draws plot.png (accuracy and loss against time, with gnuplot when installed).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace hetps {

class RunLog {
 public:
  RunLog() = default;  // records nothing
  ~RunLog() { Close(); }
  RunLog(RunLog&& other) noexcept : file_(other.file_) { other.file_ = nullptr; }
  RunLog& operator=(RunLog&&) = delete;
  RunLog(const RunLog&) = delete;

  // Opens <dir>/worker-<rank>.csv; an empty dir gives a log that records nothing. From
  // `from_clock` > 0 (a resumed run) it keeps the file's rows of earlier clocks and appends.
  static StatusOr<RunLog> Open(const std::string& dir, int rank, int64_t from_clock = 0);
  // One row, stamped now; `accuracy` only on evaluations.
  void Record(int64_t clock, int rank, double loss, std::optional<double> accuracy,
              int64_t staleness) {
    RecordAt(Now(), clock, rank, loss, accuracy, staleness);
  }
  // One row stamped `unix_seconds` (a value from Now()), e.g. a deferred evaluation's.
  void RecordAt(double unix_seconds, int64_t clock, int rank, double loss,
                std::optional<double> accuracy, int64_t staleness);
  static double Now();
  void Close();

 private:
  std::FILE* file_ = nullptr;
};

// Where a worker's training step goes, in seconds: waiting for the pulls (and, on a device,
// uploading them), waiting for the previous step's pushes, computing (with any emulated
// slowdown), encoding and handing the pushes to the client, and the clock.
struct StepSeconds {
  double pull = 0, push_wait = 0, compute = 0, encode = 0, clock = 0;
  // These sums over `steps` steps as a mean step (zeros for none).
  StepSeconds Per(int64_t steps) const {
    if (steps <= 0) return {};
    const double n = static_cast<double>(steps);
    return {pull / n, push_wait / n, compute / n, encode / n, clock / n};
  }
};

struct RunSummary {
  double accuracy = 0;            // the final model's, on the evaluation set
  std::string eval_set = "test";  // test, or validation (TrainOptions::validation)
  double wall_s = 0;       // from rank 0's first iteration until every worker finished its last
  int64_t iterations = 0;  // per worker
  int workers = 0;
  int64_t samples = 0;  // trained on, all workers
  std::string consistency;
  std::string device;                     // where rank 0 computed
  int64_t device_encoded_partitions = 0;  // partitions rank 0 encoded on its device
  StepSeconds step;                       // rank 0's mean step
  std::string model;                      // written when set (e.g. "ctr")
  // Virtual time (TrainOptions::virtual_clock): metrics.csv and wall_s are in virtual seconds
  // from the run's start (wall_s: when rank 0 finished its last step), host_s the host's.
  bool virtual_time = false;
  double host_s = 0;
  std::vector<std::pair<std::string, double>> figures;  // the workload's own, e.g. auc
};

// What one worker's client counted over the run (ClientStats); FinishRun sums every worker's
// into summary.json.
struct WorkerTraffic {
  int64_t partition_pushes = 0;  // applied or held by a server
  int64_t bytes_pushed = 0, bytes_pulled = 0;
  int64_t dropped_pushes = 0;  // dropped by a closed round (backup workers)
  int64_t push_staleness_sum = 0, max_push_staleness = 0;
};
// Writes <dir>/worker-<rank>.traffic; an empty dir writes nothing.
Status WriteWorkerTraffic(const std::string& dir, int rank, const WorkerTraffic& traffic);

// Merges the workers' files into metrics.csv, sums their traffic, writes summary.json (with
// "traffic_workers": how many workers' traffic it sums) and plot.png. The accuracy's column and
// key are named after the evaluation set: test_accuracy, or validation_accuracy (and summary.json
// says "eval_set").
// REQUIRES: every worker closed its RunLog (the caller passed a barrier after that).
Status FinishRun(const std::string& dir, const RunSummary& summary);

}  // namespace hetps
