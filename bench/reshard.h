// hetps-bench reshard: live re-sharding (hetps ctl move, docs/resharding.md) of a `mib` MiB
// model on this machine. Two servers hold the model (4 MiB partitions) and a 4 MiB "hot" tensor;
// two workers push ones to "hot" (waited, one at a time) while `hetps ctl move` sends every
// partition of hot's rank (half the model, and hot) to the other rank. JSON per size: the
// command's time (`move_s`), the MiB moved, the longest gap between two completed pushes of a
// worker during the move (`pause_s`: the moving partitions' requests wait for it) against the
// median gap, and `exact`: hot equals the acknowledged pushes' sum and the model what it held.
#pragma once

#include <vector>

namespace hetps::bench {

int RunReshardBench(const std::vector<int>& mib);

}  // namespace hetps::bench
