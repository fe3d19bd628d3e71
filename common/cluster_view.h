// ClusterView: every node of the cluster as the scheduler announced it (ids, roles, ranks,
// server addresses), plus the workers that joined since (Add). Nodes that die are tracked by
// their owner, not here.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "hetps.pb.h"

namespace hetps {

constexpr int32_t kSchedulerId = 0;

class ClusterView {
 public:
  ClusterView() = default;
  explicit ClusterView(proto::ClusterView view);

  const proto::ClusterView& proto() const { return view_; }
  // A node that joined the running cluster (WORKER_JOINED).
  void Add(const proto::NodeInfo& node);
  int num_servers() const { return view_.num_servers(); }
  int num_workers() const { return view_.num_workers(); }
  // nullptr when unknown. Constant time: a server asks it for every request.
  const proto::NodeInfo* Node(int32_t id) const;
  // Servers ordered by rank.
  const std::vector<proto::NodeInfo>& servers() const { return servers_; }
  const std::vector<proto::NodeInfo>& workers() const { return workers_; }
  // The aggregation tier's nodes (docs/aggregation-tier.md), ordered by rank.
  const std::vector<proto::NodeInfo>& aggregators() const { return aggregators_; }

 private:
  proto::ClusterView view_;
  std::unordered_map<int32_t, int> by_id_;  // index into view_.nodes()
  std::vector<proto::NodeInfo> servers_;
  std::vector<proto::NodeInfo> workers_;
  std::vector<proto::NodeInfo> aggregators_;
};

}  // namespace hetps
