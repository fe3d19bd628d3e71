// The automatic quorum of semi-asynchronous rounds (ALGORITHMS.md §4, FedSA's K): the K that
// maximizes K / t_(K), where t_(K) is the K-th smallest of the workers' training times, i.e.
// the most updates per unit time when a round waits for its K fastest; ties go to the larger K.
// Shared by the scheduler (from the iteration-time EWMAs it sees) and the servers (their own
// estimate until the scheduler's arrives).
#pragma once

#include <cstdint>
#include <vector>

namespace hetps {

// REQUIRES: every time >= 0. Returns intervals.size() for an empty or single list.
int64_t AutoQuorum(std::vector<double> intervals);

}  // namespace hetps
