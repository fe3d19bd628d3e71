#include "worker/link_table.h"

#include <fmt/format.h>

#include "worker/share_table.h"

namespace hetps {

StatusOr<std::vector<LinkKind>> ParseLinkTable(const std::string& text, const std::string& path) {
  const ShareColumns columns{
      "link table", {"up_mbps", "down_mbps", "latency_ms"}, {"jitter_ms", "loss"}};
  auto rows = ParseShareTable(text, path, columns);
  if (!rows.ok()) return rows.status();
  std::vector<LinkKind> table;
  for (const ShareRow& r : *rows) {
    LinkKind k;
    k.name = r.name;
    k.share = r.share;
    k.link.up_mbps = r.Number("up_mbps", 0);
    k.link.down_mbps = r.Number("down_mbps", 0);
    k.link.latency_ms = r.Number("latency_ms", 0);
    k.link.jitter_ms = r.Number("jitter_ms", 0);
    k.link.loss = r.Number("loss", 0);
    if (Status s = ValidateLinkOptions(k.link); !s.ok()) {
      return Status::InvalidArgument(
          fmt::format("link table {}:{}: {}", path, r.line, s.message()));
    }
    table.push_back(std::move(k));
  }
  return table;
}

StatusOr<std::vector<LinkKind>> ReadLinkTable(const std::string& path) {
  auto text = ReadTableFile(path, "link table");
  if (!text.ok()) return text.status();
  return ParseLinkTable(*text, path);
}

const LinkKind& DrawLink(const std::vector<LinkKind>& table, uint64_t seed, int rank) {
  std::vector<double> shares;
  for (const LinkKind& k : table) shares.push_back(k.share);
  return table[DrawShare(shares, seed, rank, 3)];
}

}  // namespace hetps
