#include "server/table/row_init.h"

#include <algorithm>
#include <cmath>

#include "common/mix.h"

namespace hetps {
RowInit::RowInit(const std::string& table, const TableOptions& o)
    : kind_(o.init == "zeros"     ? Kind::kZeros
            : o.init == "uniform" ? Kind::kUniform
                                  : Kind::kNormal),
      dim_(o.dim),
      scale_(static_cast<float>(o.init_scale)) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name, then the seed mixed in
  for (unsigned char c : table) h = (h ^ c) * 0x100000001b3ULL;
  salt_ = Mix64(h ^ Mix64(o.seed));
}

void RowInit::Fill(uint64_t key, float* row) const {
  if (kind_ == Kind::kZeros) {
    std::fill(row, row + dim_, 0.0f);
    return;
  }
  const uint64_t base = Mix64(key ^ salt_);
  for (int64_t j = 0; j < dim_; ++j) {
    const uint64_t a = Mix64(base + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(2 * j + 1));
    if (kind_ == Kind::kUniform) {
      row[j] = static_cast<float>((2 * UnitOf(a) - 1) * scale_);
    } else {  // Box-Muller, one normal per coordinate
      const uint64_t b = Mix64(a ^ 0xd1b54a32d192ed03ULL);
      row[j] = static_cast<float>(std::sqrt(-2 * std::log(UnitOf(a))) *
                                  std::cos(6.283185307179586 * UnitOf(b)) * scale_);
    }
  }
}

}  // namespace hetps
