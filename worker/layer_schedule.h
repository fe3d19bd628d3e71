// LayerSchedule: which layers a federated client uploads in which round (layer-wise
// asynchronous updates, ALGORITHMS.md §5). Shallow layers (index < deep_from) go every round;
// deep layers only on rounds t with t mod P in {P-f+1, ..., P-1, 0}: with the published P = 15,
// f = 5 that is rounds 11, 12, 13, 14 and 0 of every 15, a third of them. Pair it with the
// servers' --aggregator=temporal, which leaves a layer nobody uploaded unchanged.
#pragma once

#include <cstdint>

namespace hetps {

class LayerSchedule {
 public:
  // REQUIRES: 1 <= deep_rounds <= period.
  explicit LayerSchedule(int32_t deep_from, int64_t period = 15, int64_t deep_rounds = 5)
      : deep_from_(deep_from), period_(period), deep_rounds_(deep_rounds) {}
  bool Uploads(int32_t layer, int64_t round) const {
    if (layer < deep_from_) return true;
    const int64_t r = round % period_;
    return r == 0 || r > period_ - deep_rounds_;
  }

 private:
  int32_t deep_from_;
  int64_t period_, deep_rounds_;
};

}  // namespace hetps
