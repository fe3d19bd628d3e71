#include "worker/link_table.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
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

}  // namespace

StatusOr<std::vector<LinkKind>> ParseLinkTable(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::string line;
  std::map<std::string, size_t> column;
  std::vector<LinkKind> table;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    const std::vector<std::string> cells = Cells(line);
    if (column.empty()) {  // the header
      for (size_t i = 0; i < cells.size(); ++i) column[cells[i]] = i;
      for (const char* need : {"name", "share", "up_mbps", "down_mbps", "latency_ms"}) {
        if (!column.contains(need)) {
          return Status::InvalidArgument(
              fmt::format("link table {}:{}: the header has no column '{}'", path, number, need));
        }
      }
      continue;
    }
    auto number_at = [&](const char* name, double fallback) -> StatusOr<double> {
      if (!column.contains(name)) return fallback;
      const size_t i = column.at(name);
      if (i >= cells.size()) {
        return Status::InvalidArgument(
            fmt::format("link table {}:{}: no value for '{}'", path, number, name));
      }
      try {
        size_t used = 0;
        const double v = std::stod(cells[i], &used);
        if (used == cells[i].size() && v >= 0) return v;
      } catch (const std::exception&) {
      }
      return Status::InvalidArgument(fmt::format("link table {}:{}: {} '{}' is not a number >= 0",
                                                 path, number, name, cells[i]));
    };
    LinkKind k;
    k.name = column.at("name") < cells.size() ? cells[column.at("name")] : "";
    double* fields[] = {&k.share,           &k.link.up_mbps,   &k.link.down_mbps,
                        &k.link.latency_ms, &k.link.jitter_ms, &k.link.loss};
    const char* names[] = {"share", "up_mbps", "down_mbps", "latency_ms", "jitter_ms", "loss"};
    for (size_t f = 0; f < 6; ++f) {
      auto v = number_at(names[f], 0);
      if (!v.ok()) return v.status();
      *fields[f] = *v;
    }
    if (Status s = ValidateLinkOptions(k.link); !s.ok()) {
      return Status::InvalidArgument(
          fmt::format("link table {}:{}: {}", path, number, s.message()));
    }
    table.push_back(std::move(k));
  }
  double shares = 0;
  for (const LinkKind& k : table) shares += k.share;
  if (table.empty() || !(shares > 0)) {
    return Status::InvalidArgument(fmt::format("link table {} has no row with a share > 0", path));
  }
  return table;
}

StatusOr<std::vector<LinkKind>> ReadLinkTable(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot read the link table {}", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseLinkTable(text.str(), path);
}

const LinkKind& DrawLink(const std::vector<LinkKind>& table, uint64_t seed, int rank) {
  std::vector<double> shares;
  for (const LinkKind& k : table) shares.push_back(k.share);
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(rank) * 31 + 3);
  std::discrete_distribution<size_t> pick(shares.begin(), shares.end());
  return table[pick(rng)];
}

}  // namespace hetps
