#include "cli/report_stats.h"

#include <fmt/format.h>

#include <cmath>
#include <sstream>

namespace hetps {

MeanCi MeanAndCi(const std::vector<double>& values) {
  // Student's t, two-sided 95%, for 1..30 degrees of freedom; 1.96 beyond.
  static constexpr double kT[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                  2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                  2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                  2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  MeanCi m;
  m.n = values.size();
  if (m.n == 0) return m;
  for (double v : values) m.mean += v / static_cast<double>(m.n);
  if (m.n < 2) return m;
  double var = 0;
  for (double v : values) var += (v - m.mean) * (v - m.mean) / static_cast<double>(m.n - 1);
  const size_t df = m.n - 1;
  m.ci95 = (df <= 30 ? kT[df - 1] : 1.96) * std::sqrt(var / static_cast<double>(m.n));
  return m;
}

std::string ShowMeanCi(const MeanCi& m, const char* format) {
  if (m.n == 0) return "-";
  std::string text = fmt::format(fmt::runtime(format), m.mean);
  if (m.n > 1) text += " ± " + fmt::format(fmt::runtime(format), m.ci95);
  return text;
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

StatusOr<CsvTable> ReadCsvTable(const std::string& text, const std::vector<std::string>& required,
                                const std::string& what) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return Status::NotFound(what + " is empty");
  CsvTable table;
  const std::vector<std::string> header = SplitCsv(line);
  for (size_t i = 0; i < header.size(); ++i) table.column[header[i]] = i;
  for (const std::string& name : required) {
    if (!table.column.contains(name)) {
      return Status::Malformed(fmt::format("{} has no column '{}'", what, name));
    }
  }
  int number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    std::vector<std::string> cells = SplitCsv(line);
    if (cells.size() != header.size()) {
      return Status::Malformed(fmt::format("{} line {}: {} cells, the header has {}", what, number,
                                           cells.size(), header.size()));
    }
    table.rows.push_back({number, std::move(cells)});
  }
  return table;
}

std::string Mb(int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / 1e6); }

}  // namespace hetps
