// Parsing of flag values such as "1,16,64": positive integers separated by commas.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

// Fails (naming the bad item) on an empty list, a non-number, or a value outside [1, max].
StatusOr<std::vector<int64_t>> ParsePositiveList(const std::string& text, int64_t max = INT64_MAX);

}  // namespace hetps
