// hetps-bench capacity: a model far larger than a partition, held by several servers with a
// stateful optimizer, pushed and pulled whole by one worker. Reports each server's resident
// memory against what it must hold (its parameters plus the optimizer's state: Adam keeps two
// moments per parameter), beyond the fixed overhead it had before any partition existed, at
// rest and at its peak while the whole model is pushed and pulled; and the push and pull
// rates of the whole model. JSON lines.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hetps::bench {

struct CapacityBenchOptions {
  int model_mib = 4096;  // the model's float32 parameters in MiB (4096: about 1.07e9 floats)
  int servers = 4;
  int rounds = 3;  // >= 2: whole-model push then pull, each waited; the first is not timed
};

int RunCapacityBench(const CapacityBenchOptions& o);

// A field of /proc/<pid>/status in bytes ("VmRSS", "VmHWM"); -1 when unreadable.
int64_t StatusBytes(pid_t pid, const std::string& field);
// Each process's resident memory once it has not changed for 300 ms (at most 15 s).
std::vector<int64_t> SettledRss(const std::vector<pid_t>& pids);

}  // namespace hetps::bench
