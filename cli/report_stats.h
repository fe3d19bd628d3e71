// What the experiment reports share (hetps fed, hetps experiment): means with confidence
// intervals, and reading the CSV logs the runs write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

// The mean of `values` and the half-width of its 95% confidence interval (Student's t; 0 for
// fewer than two values).
struct MeanCi {
  double mean = 0, ci95 = 0;
  size_t n = 0;
};
MeanCi MeanAndCi(const std::vector<double>& values);

// "mean ± ci95" with `format` (a fmt format for one double, e.g. "{:.2f}"); just the mean for
// one value, "-" for none.
std::string ShowMeanCi(const MeanCi& m, const char* format);

// The cells of one CSV line (no quoting: the runs' logs have none); a trailing comma gives a
// last empty cell.
std::vector<std::string> SplitCsv(const std::string& line);

// A CSV log read whole: its header's columns and its rows, each with the cells of the header.
struct CsvTable {
  struct Row {
    int line = 0;  // in the text, from 1 (the header)
    std::vector<std::string> cells;
  };
  std::map<std::string, size_t> column;
  std::vector<Row> rows;
  const std::string& Cell(const Row& row, const std::string& name) const {
    return row.cells[column.at(name)];
  }
};
// Reads `text`, whose first line names the columns; `what` names it in errors ("metrics.csv").
// Fails when it is empty, lacks a `required` column, or a row has another number of cells than
// the header; empty lines are skipped.
StatusOr<CsvTable> ReadCsvTable(const std::string& text, const std::vector<std::string>& required,
                                const std::string& what);

// Bytes as megabytes (1e6) with one decimal.
std::string Mb(int64_t bytes);

}  // namespace hetps
