#include "common/cluster_view.h"

#include <algorithm>

namespace hetps {

ClusterView::ClusterView(proto::ClusterView view) : view_(std::move(view)) {
  for (const proto::NodeInfo& n : view_.nodes()) {
    if (n.role() == proto::SERVER) servers_.push_back(n);
    if (n.role() == proto::WORKER) workers_.push_back(n);
  }
  auto by_rank = [](const proto::NodeInfo& a, const proto::NodeInfo& b) {
    return a.rank() < b.rank();
  };
  std::sort(servers_.begin(), servers_.end(), by_rank);
  std::sort(workers_.begin(), workers_.end(), by_rank);
}

const proto::NodeInfo* ClusterView::Node(int32_t id) const {
  for (const proto::NodeInfo& n : view_.nodes()) {
    if (n.id() == id) return &n;
  }
  return nullptr;
}

}  // namespace hetps
