// Client selection for federated rounds (scheduler/fed_rounds.h): which of the idle clients
// train in the next round. A policy sees every idle client's history (rounds it was selected
// for, kept in, missed; its last training time) and picks `count` of them. Chosen by a spec
// string (--selection=random) from the registry below; a new policy is one file with its
// Register function, one line in selections.def, and its test.
//
// Thread-safety: none; owned by the scheduler's loop thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "common/registry.h"

namespace hetps {

// What the scheduler knows about one federated client.
struct ClientRecord {
  static constexpr size_t kHistory = 64;  // train_s and missed_rounds keep the latest this many
  int32_t id = 0;                         // node id
  int rank = 0;
  int64_t selected = 0;            // rounds it was selected for
  int64_t kept = 0;                // rounds that used its upload
  int64_t missed = 0;              // rounds it was selected for and did not make
  int64_t consecutive_missed = 0;  // misses since its last kept upload
  int64_t last_round = -1;         // the last round it was selected for
  int64_t last_missed = -1;        // the last round it missed
  double selected_at = 0;          // when it was last selected (scheduler seconds)
  std::vector<double> train_s;     // selection to upload, per upload (late ones too), oldest first
  std::vector<int64_t> missed_rounds;    // the rounds it missed, oldest first
  int64_t bytes_up = 0, bytes_down = 0;  // payload it reported pushing and pulling
  // What it emulates, as it reported at check-in (1 and 0: a plain device on no emulated link).
  double slowdown = 1, up_mbps = 0, down_mbps = 0, latency_ms = 0, loss = 0;
};

class SelectionPolicy {
 public:
  virtual ~SelectionPolicy() = default;
  // `count` distinct ids out of `idle` (count <= idle.size()) for round `round` of
  // `total_rounds` (0: no limit).
  virtual std::vector<int32_t> Select(const std::vector<const ClientRecord*>& idle, int count,
                                      int64_t round, int64_t total_rounds,
                                      std::mt19937_64& rng) = 0;
};

// Candidates in rank order (then node id): what a policy draws depends on the clients' ranks and
// the seed, not on the order they became idle nor on the node ids they were given in the order
// they happened to join.
inline void SortByRank(std::vector<const ClientRecord*>& candidates) {
  std::sort(candidates.begin(), candidates.end(), [](const ClientRecord* a, const ClientRecord* b) {
    return a->rank != b->rank ? a->rank < b->rank : a->id < b->id;
  });
}

struct SelectionEntry {
  std::function<std::unique_ptr<SelectionPolicy>(const AlgorithmSpec&)> make;
};
using SelectionRegistry = Registry<SelectionEntry>;

const SelectionRegistry& Selections();
StatusOr<std::unique_ptr<SelectionPolicy>> MakeSelection(const std::string& spec);

}  // namespace hetps
