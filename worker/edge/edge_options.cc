// ValidateEdgeOptions (worker/edge/edge_client.h): what an edge client refuses before it
// joins, each with the flag it concerns.
#include <fmt/format.h>

#include "common/privacy.h"
#include "worker/edge/attack.h"
#include "worker/edge/availability.h"
#include "worker/edge/edge_client.h"

namespace hetps {

Status ValidateEdgeOptions(const EdgeOptions& o) {
  if (o.rounds < 1 || o.eval_every < 1 || o.local.epochs < 1 || o.local.batch < 1) {
    return Status::InvalidArgument("rounds, eval_every, local_epochs and batch must be >= 1");
  }
  if (!(o.local.lr > 0) || !(o.local.prox_mu >= 0) || !(o.slowdown >= 1.0)) {
    return Status::InvalidArgument("local_lr must be > 0, prox_mu >= 0 and slowdown >= 1");
  }
  if (o.partition != "iid" && o.partition != "dirichlet" && o.partition != "shards") {
    return Status::InvalidArgument(
        fmt::format("unknown partition '{}' (iid, dirichlet, shards)", o.partition));
  }
  if (o.evaluators < 0) return Status::InvalidArgument("evaluators must be >= 0");
  if (o.deep_from >= 0 && !(o.deep_rounds >= 1 && o.deep_rounds <= o.deep_period)) {
    return Status::InvalidArgument("the layer schedule needs 1 <= deep_rounds <= deep_period");
  }
  if (!(o.fail_fraction >= 0 && o.fail_fraction <= 1)) {
    return Status::InvalidArgument("fail_fraction must be in [0, 1]");
  }
  if (Status s = ValidateAttackFlags(o.byzantine_fraction, o.attack); !s.ok()) {
    return Status::InvalidArgument("--attack: " + s.message());
  }
  if (auto dp = ParsePrivacy(o.dp); !dp.ok()) {
    return Status::InvalidArgument("--dp: " + dp.status().message());
  } else if (dp->on() && o.deep_from >= 0) {
    return Status::InvalidArgument(
        "--dp clips each round's whole update: --deep_from would send deep layers later with "
        "several rounds' deltas summed, beyond the clip bound");
  }
  if (auto a = MakeAvailability(o.availability, 1); !a.ok()) {  // a trace is read here too
    return Status::InvalidArgument("--availability: " + a.status().message());
  }
  if (o.partition == "dirichlet" && !(o.dirichlet_alpha > 0)) {
    return Status::InvalidArgument("dirichlet_alpha must be > 0");
  }
  if (o.partition == "shards" && o.shards_per_client < 1) {
    return Status::InvalidArgument("shards_per_client must be >= 1");
  }
  return Status();
}

}  // namespace hetps
