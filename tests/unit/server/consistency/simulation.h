// A deterministic discrete-event simulation of workers under a consistency controller: each
// worker reads at its clock c, computes for its own duration, pushes its clock-c update
// (counted per worker, like the one-hot e_i of ALGORITHMS.md §1), finishes clock c and asks to
// start c + 1. Time is simulated; nothing sleeps.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "server/consistency/controller.h"

namespace hetps::testing {

struct SimResult {
  std::vector<int64_t> finished;   // clocks finished per worker
  int64_t max_gap = 0;             // max over granted starts of (clock started - slowest clock)
  int64_t max_read_staleness = 0;  // max over reads of (reader's clock - min pushes seen)
  int64_t reads = 0;
  std::vector<std::pair<int32_t, int64_t>> grants;  // (worker, clock) in grant order
};

// `durations[i]` is worker i's compute time per clock; workers are ids 0..n-1. A worker whose
// duration is infinity never finishes a clock (a paused worker). Runs until `until`.
inline SimResult Simulate(ConsistencyController& c, const std::vector<double>& durations,
                          double until) {
  const int n = static_cast<int>(durations.size());
  enum Phase { kRead, kCompute, kStart };
  std::vector<Phase> phase(n, kRead);
  std::vector<int64_t> clock(n, 0);
  std::vector<double> done_at(n, 0);
  SimResult r;
  r.finished.assign(n, 0);
  double now = 0;
  while (true) {
    bool progress = true;
    while (progress) {  // settle every decision possible at `now`
      progress = false;
      for (int w = 0; w < n; ++w) {
        if (phase[w] == kStart && c.TryStart(w, c.ContinueAt(w, clock[w]), now)) {
          clock[w] = c.ContinueAt(w, clock[w]);
          r.grants.push_back({w, clock[w]});
          r.max_gap = std::max(r.max_gap,
                               clock[w] - *std::min_element(r.finished.begin(), r.finished.end()));
          phase[w] = kRead;
          progress = true;
        }
        if (phase[w] == kRead && c.ReadReady(w, clock[w])) {
          const int64_t seen = *std::min_element(r.finished.begin(), r.finished.end());
          r.max_read_staleness = std::max(r.max_read_staleness, clock[w] - seen);
          ++r.reads;
          phase[w] = kCompute;
          done_at[w] = now + durations[w];
          progress = true;
        }
      }
    }
    double next = std::numeric_limits<double>::infinity();
    for (int w = 0; w < n; ++w) {
      if (phase[w] == kCompute) next = std::min(next, done_at[w]);
    }
    if (next > until) break;  // also: everyone blocked
    now = next;
    for (int w = 0; w < n; ++w) {
      if (phase[w] == kCompute && done_at[w] <= now) {
        ++r.finished[w];  // its clock-c update is in
        c.OnClock(w, clock[w], now);
        phase[w] = kStart;
      }
    }
  }
  return r;
}

inline std::vector<int32_t> Ids(int n) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  return ids;
}

// The controller of consistency spec `spec` ("ssp:staleness=2") over workers 0..n-1 (the spec
// must be valid).
inline std::unique_ptr<ConsistencyController> Make(const std::string& spec, int n) {
  auto c = MakeController(spec, Ids(n));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

}  // namespace hetps::testing
