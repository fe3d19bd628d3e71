#include "worker/share_table.h"

#include <fmt/format.h>

#include <fstream>
#include <random>
#include <sstream>

namespace hetps {
namespace {

std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) {
    const size_t a = cell.find_first_not_of(" \t\r");
    const size_t b = cell.find_last_not_of(" \t\r");
    cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
  }
  return cells;
}

// One data line's row under the header's `column` positions.
StatusOr<ShareRow> ParseRow(const std::vector<std::string>& cells,
                            const std::map<std::string, size_t>& column,
                            const ShareColumns& columns, const std::string& where) {
  ShareRow row;
  row.name = column.at("name") < cells.size() ? cells[column.at("name")] : "";
  std::vector<std::string> numeric = {"share"};
  numeric.insert(numeric.end(), columns.required.begin(), columns.required.end());
  numeric.insert(numeric.end(), columns.optional.begin(), columns.optional.end());
  for (const std::string& name : numeric) {
    auto at = column.find(name);
    if (at == column.end()) continue;
    if (at->second >= cells.size()) {
      return Status::InvalidArgument(fmt::format("{}: no value for '{}'", where, name));
    }
    const std::string& cell = cells[at->second];
    try {
      size_t used = 0;
      const double v = std::stod(cell, &used);
      if (used == cell.size() && v >= 0) {
        row.numbers[name] = v;
        continue;
      }
    } catch (const std::exception&) {
    }
    return Status::InvalidArgument(
        fmt::format("{}: {} '{}' is not a number >= 0", where, name, cell));
  }
  row.share = row.numbers["share"];
  row.numbers.erase("share");
  return row;
}

}  // namespace

StatusOr<std::vector<ShareRow>> ParseShareTable(const std::string& text, const std::string& path,
                                                const ShareColumns& columns) {
  std::istringstream in(text);
  std::string line;
  std::map<std::string, size_t> column;
  std::vector<ShareRow> table;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    const std::vector<std::string> cells = Cells(line);
    const std::string where = fmt::format("{} {}:{}", columns.what, path, number);
    if (column.empty()) {  // the header
      for (size_t i = 0; i < cells.size(); ++i) column[cells[i]] = i;
      std::vector<std::string> need = {"name", "share"};
      need.insert(need.end(), columns.required.begin(), columns.required.end());
      for (const std::string& n : need) {
        if (!column.contains(n)) {
          return Status::InvalidArgument(
              fmt::format("{}: the header has no column '{}'", where, n));
        }
      }
      continue;
    }
    auto row = ParseRow(cells, column, columns, where);
    if (!row.ok()) return row.status();
    row->line = number;
    table.push_back(std::move(*row));
  }
  double shares = 0;
  for (const ShareRow& r : table) shares += r.share;
  if (table.empty() || !(shares > 0)) {
    return Status::InvalidArgument(
        fmt::format("{} {} has no row with a share > 0", columns.what, path));
  }
  return table;
}

StatusOr<std::string> ReadTableFile(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot read the {} {}", what, path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t DrawShare(const std::vector<double>& shares, uint64_t seed, int rank, uint64_t salt) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(rank) * 31 + salt);
  std::discrete_distribution<size_t> pick(shares.begin(), shares.end());
  return pick(rng);
}

}  // namespace hetps
