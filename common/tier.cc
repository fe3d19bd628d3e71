#include "common/tier.h"

#include <string>

namespace hetps {

namespace {

std::vector<const proto::NodeInfo*> AggregatorsOn(const ClusterView& view,
                                                  const std::string& host) {
  std::vector<const proto::NodeInfo*> out;
  for (const proto::NodeInfo& a : view.aggregators()) {
    if (a.host() == host) out.push_back(&a);
  }
  return out;
}

}  // namespace

int32_t AggregatorOf(const ClusterView& view, int32_t worker) {
  const proto::NodeInfo* w = view.Node(worker);
  if (w == nullptr || w->role() != proto::WORKER) return -1;
  const std::vector<const proto::NodeInfo*> local = AggregatorsOn(view, w->host());
  if (local.empty()) return -1;
  return local[static_cast<size_t>(w->rank()) % local.size()]->id();
}

std::vector<int32_t> GroupOf(const ClusterView& view, int32_t aggregator) {
  std::vector<int32_t> out;
  for (const proto::NodeInfo& w : view.workers()) {
    if (AggregatorOf(view, w.id()) == aggregator) out.push_back(w.id());
  }
  return out;
}

}  // namespace hetps
