// A sparse table's initializer: the values of a new row, a pure function of (the table's seed,
// its name, the key), so a row created again (after eviction, expiry, a restart) or on another
// server starts from exactly the same values.
#pragma once

#include <cstdint>
#include <string>

#include "hetps/shard_map.h"

namespace hetps {

class RowInit {
 public:
  RowInit(const std::string& table, const TableOptions& options);
  // Writes the row of `key` (dim floats) into `row`.
  void Fill(uint64_t key, float* row) const;

 private:
  enum class Kind { kZeros, kUniform, kNormal };
  Kind kind_;
  int64_t dim_;
  float scale_;
  uint64_t salt_;  // the seed and the table's name
};

}  // namespace hetps
