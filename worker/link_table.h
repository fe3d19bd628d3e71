// A table of edge links (--link_table=FILE): kinds of links with the share of clients on each,
// so that a scenario's clients get links in the proportions of published measurements instead
// of one figure with a spread. CSV with a header line naming the columns, in any order:
//   name,share,up_mbps,down_mbps,latency_ms[,jitter_ms][,loss][,source]
// (a '#' line is a comment; `source` is free text: where the figures come from). Each client
// draws one row, seeded by the link seed and its rank, with chance share / (sum of shares), so
// the same client gets the same link in every run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/link_shaper.h"

namespace hetps {

struct LinkKind {
  std::string name;
  double share = 0;
  LinkOptions link;  // up_mbps, down_mbps, latency_ms, jitter_ms, loss
};

// Parses the table's text; `path` names it in errors (with the line number).
StatusOr<std::vector<LinkKind>> ParseLinkTable(const std::string& text, const std::string& path);
StatusOr<std::vector<LinkKind>> ReadLinkTable(const std::string& path);

// The row client `rank` draws with `seed`. REQUIRES: a table ParseLinkTable accepted.
const LinkKind& DrawLink(const std::vector<LinkKind>& table, uint64_t seed, int rank);

}  // namespace hetps
