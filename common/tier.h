// The aggregation tier's placement (docs/aggregation-tier.md): which aggregator a worker pushes
// through, read from the cluster view the scheduler announced, so workers and aggregators agree
// without a word between them. Host-local: a worker uses an aggregator of its own host (the
// host each registered with); with several on a host, its workers are dealt out by rank.
#pragma once

#include <cstdint>
#include <vector>

#include "common/cluster_view.h"

namespace hetps {

// The aggregator node id worker `worker` pushes through, or -1 (none on its host, or not a
// worker of the view).
int32_t AggregatorOf(const ClusterView& view, int32_t worker);
// The workers (node ids, by rank) that push through aggregator `aggregator`.
std::vector<int32_t> GroupOf(const ClusterView& view, int32_t aggregator);

}  // namespace hetps
