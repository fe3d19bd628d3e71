#include "common/int_list.h"

#include <fmt/format.h>

#include <sstream>

namespace hetps {

StatusOr<std::vector<int64_t>> ParsePositiveList(const std::string& text, int64_t max) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 1 || v > max) {
      return Status::InvalidArgument(
          fmt::format("'{}' in '{}' is not an integer in [1, {}]", item, text, max));
    }
    out.push_back(v);
  }
  if (out.empty()) return Status::InvalidArgument("empty list");
  if (text.back() == ',')
    return Status::InvalidArgument(fmt::format("'{}' ends with a comma", text));
  return out;
}

}  // namespace hetps
