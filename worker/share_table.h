// A table of kinds with the share of a population on each, read from CSV (--link_table,
// --device_table): a header line names the columns, in any order; '#' lines are comments; a
// `name` and a `share` column, numeric columns (each >= 0), and free-text ones (e.g. `source`:
// where the figures come from) that are kept out of the numbers. Each client draws one row,
// seeded by a seed and its rank, with chance share / (sum of shares), so the same client gets
// the same row in every run.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct ShareRow {
  int line = 0;  // in the file, for errors
  std::string name;
  double share = 0;
  std::map<std::string, double> numbers;  // the numeric columns this row has

  double Number(const std::string& column, double fallback) const {
    auto it = numbers.find(column);
    return it == numbers.end() ? fallback : it->second;
  }
};

struct ShareColumns {
  std::string what;                   // "link table": how errors name the file
  std::vector<std::string> required;  // numeric columns the header must have (beside name, share)
  std::vector<std::string> optional;  // numeric columns it may have
};

// Parses the table's text; `path` names it in errors (with the line number). Fails on a missing
// column, a value that is not a number >= 0, a short row or no row with a share > 0.
StatusOr<std::vector<ShareRow>> ParseShareTable(const std::string& text, const std::string& path,
                                                const ShareColumns& columns);
// The file's text, or NotFound naming it as `what`.
StatusOr<std::string> ReadTableFile(const std::string& path, const std::string& what);

// The row index client `rank` draws with `seed` from the rows' `shares`; `salt` keeps one
// table's draws apart from another's. REQUIRES: shares of a table ParseShareTable accepted.
size_t DrawShare(const std::vector<double>& shares, uint64_t seed, int rank, uint64_t salt);

}  // namespace hetps
