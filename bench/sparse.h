// `hetps-bench sparse`: sparse tables (docs/tables.md) on a cluster on loopback. For each row
// width and eviction policy: rows per second of PushRows, PullRows and a push then a pull of
// one Zipf-distributed batch of keys, beside a raw ZeroMQ loop moving the same bytes (keys and
// rows) in the same run; the servers' resident memory per row against the row's own bytes;
// and with --max_rows, the cap held over a long Zipf stream with each policy's hit rate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hetps::bench {

struct SparseBenchOptions {
  int servers = 1;
  int workers = 1;  // in-process clients, each calling one request at a time
  std::vector<int64_t> dims = {16};
  int64_t keys_per_op = 4096;
  uint64_t ids = 100000000;  // distinct ids the Zipf stream draws from
  double zipf = 1.05;
  int64_t max_rows = 0;  // per server; 0: no cap (then the memory phase fills memory_rows)
  std::vector<std::string> evictions = {"none"};
  int64_t memory_rows = 1000000;  // rows loaded to measure memory per row (no cap)
  int64_t stream_ops = 2000;      // batches of the eviction stream (with --max_rows)
  double seconds = 2;             // per measured figure
  std::string optimizer = "adagrad:lr=0.01";
};

// Prints one JSON object per row width and policy; returns the process exit code.
int RunSparseBench(const SparseBenchOptions& options);

}  // namespace hetps::bench
