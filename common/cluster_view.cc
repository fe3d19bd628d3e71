#include "common/cluster_view.h"

#include <algorithm>

namespace hetps {

namespace {

bool ByRank(const proto::NodeInfo& a, const proto::NodeInfo& b) { return a.rank() < b.rank(); }

}  // namespace

ClusterView::ClusterView(proto::ClusterView view) : view_(std::move(view)) {
  for (int i = 0; i < view_.nodes_size(); ++i) by_id_[view_.nodes(i).id()] = i;
  for (const proto::NodeInfo& n : view_.nodes()) {
    if (n.role() == proto::SERVER) servers_.push_back(n);
    if (n.role() == proto::WORKER) workers_.push_back(n);
    if (n.role() == proto::AGGREGATOR) aggregators_.push_back(n);
  }
  std::sort(servers_.begin(), servers_.end(), ByRank);
  std::sort(aggregators_.begin(), aggregators_.end(), ByRank);
  std::sort(workers_.begin(), workers_.end(), ByRank);
}

void ClusterView::Add(const proto::NodeInfo& node) {
  by_id_[node.id()] = view_.nodes_size();
  *view_.add_nodes() = node;
  std::vector<proto::NodeInfo>& same = node.role() == proto::SERVER       ? servers_
                                       : node.role() == proto::AGGREGATOR ? aggregators_
                                                                          : workers_;
  same.insert(std::upper_bound(same.begin(), same.end(), node, ByRank), node);
}

const proto::NodeInfo* ClusterView::Node(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &view_.nodes(it->second);
}

}  // namespace hetps
