// A table of edge devices (--device_table=FILE): kinds of devices with the share of clients on
// each and their sustained training throughput from published measurements, so that a
// scenario's clients compute at those devices' rates instead of one reference rate with a
// spread. CSV (worker/share_table.h) with the columns
//   name,share,gflops[,gflops_high][,source]
// gflops (GFLOP/s, > 0): the rate measured; with gflops_high, the measurements' range: each
// client drawing the row gets a rate uniform in [gflops, gflops_high] (seeded by the seed and
// its rank). The table's fastest rate is the reference device: a client's slowdown is the
// reference rate over its own (so the host stands for the fastest device in wall time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct DeviceKind {
  std::string name;
  double share = 0;
  double gflops = 0, gflops_high = 0;  // the range of the measured rate (equal: one figure)
};

// A client's device: its row's name and the rate it drew.
struct Device {
  std::string name;
  double gflops = 0;
};

// Parses the table's text; `path` names it in errors (with the line number).
StatusOr<std::vector<DeviceKind>> ParseDeviceTable(const std::string& text,
                                                   const std::string& path);
StatusOr<std::vector<DeviceKind>> ReadDeviceTable(const std::string& path);

// The device client `rank` draws with `seed`. REQUIRES: a table ParseDeviceTable accepted.
Device DrawDevice(const std::vector<DeviceKind>& table, uint64_t seed, int rank);
// The reference device's rate: the table's fastest.
double ReferenceGflops(const std::vector<DeviceKind>& table);

}  // namespace hetps
