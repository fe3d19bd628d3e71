// hetps-bench recovery: how long a durable server takes from its restart to serving again.
// For each model size, one server (--data_dir, process durability, Adam: values plus two
// moments) takes five whole-model pushes (its log then holds a checkpoint and an update after
// it), is SIGKILLed, declared dead, and started again on its data dir; the time from that start
// until a worker's pull of the whole model is answered is the recovery time (restore_s: the
// server's own figure for reading its checkpoints and replaying its log). JSON per size.
#pragma once

#include <vector>

namespace hetps::bench {

struct RecoveryBenchOptions {
  std::vector<int> mib = {256, 1024};  // model sizes
};

int RunRecoveryBench(const RecoveryBenchOptions& o);

}  // namespace hetps::bench
