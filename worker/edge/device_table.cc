#include "worker/edge/device_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "worker/share_table.h"

namespace hetps {

StatusOr<std::vector<DeviceKind>> ParseDeviceTable(const std::string& text,
                                                   const std::string& path) {
  auto rows = ParseShareTable(text, path, {"device table", {"gflops"}, {"gflops_high"}});
  if (!rows.ok()) return rows.status();
  std::vector<DeviceKind> table;
  for (const ShareRow& r : *rows) {
    DeviceKind k{r.name, r.share, r.Number("gflops", 0), 0};
    k.gflops_high = r.Number("gflops_high", k.gflops);
    if (!(k.gflops > 0) || !(k.gflops_high >= k.gflops)) {
      return Status::InvalidArgument(fmt::format(
          "device table {}:{}: gflops must be > 0 and gflops_high >= gflops", path, r.line));
    }
    table.push_back(std::move(k));
  }
  return table;
}

StatusOr<std::vector<DeviceKind>> ReadDeviceTable(const std::string& path) {
  auto text = ReadTableFile(path, "device table");
  if (!text.ok()) return text.status();
  return ParseDeviceTable(*text, path);
}

Device DrawDevice(const std::vector<DeviceKind>& table, uint64_t seed, int rank) {
  std::vector<double> shares;
  for (const DeviceKind& k : table) shares.push_back(k.share);
  const DeviceKind& k = table[DrawShare(shares, seed, rank, 5)];
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(rank) * 31 + 6);
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  return {k.name, k.gflops + u * (k.gflops_high - k.gflops)};
}

double ReferenceGflops(const std::vector<DeviceKind>& table) {
  double fastest = 0;
  for (const DeviceKind& k : table) fastest = std::max(fastest, k.gflops_high);
  return fastest;
}

}  // namespace hetps
