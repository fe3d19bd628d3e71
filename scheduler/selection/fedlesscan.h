// FedLesScan's client selection (Elzohairy et al., BigData'22; ALGORITHMS.md §7), registered as
// --selection=fedlesscan. Each round: clients never selected ("rookies") first; clients that
// missed their last round(s) back off (2^(consecutive misses - 1) rounds, at most 8) and only
// fill what is left; the rest are clustered by DBSCAN (min_samples 2) over the standardised
// features [EMA_0.5(training times), 1.5 * max_time * EMA_0.8((missed round + 1) / round)],
// with eps swept over 0.01..1.91 in steps of 0.1 and the labelling of best Calinski-Harabasz
// score kept (DBSCAN's noise counts as one cluster, as in the reference code). Clusters are
// ordered by their mean score (fast and reliable first); the draw starts at the cluster whose
// rank matches the run's progress (round / rounds) and takes the least-used clients, wrapping
// around. The helpers are exposed for tests.
//
// Not here: FedLesScan's acceptance of results up to `tolerance` rounds late (weighted by
// (result round + 1) / (round + 1)); under the consistency selected a late upload is dropped.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "scheduler/selection/selection.h"

namespace hetps {

// Per client: [EMA_0.5 of its training times, 1.5 * max_time * EMA_0.8 of (missed + 1) / round].
std::vector<std::array<double, 2>> FedLesScanFeatures(
    const std::vector<const ClientRecord*>& clients, int64_t round);
// DBSCAN labels (0, 1, ... per cluster; -1 noise) with Euclidean distance.
std::vector<int> Dbscan(const std::vector<std::array<double, 2>>& points, double eps,
                        int min_samples);
// The Calinski-Harabasz index of a labelling (every distinct label, -1 too, is a cluster);
// -1 when it has fewer than 2 clusters or as many as points.
double CalinskiHarabasz(const std::vector<std::array<double, 2>>& points,
                        const std::vector<int>& labels);
// The labelling FedLesScan uses: standardise, sweep eps, keep the best Calinski-Harabasz.
std::vector<int> FedLesScanClusters(const std::vector<std::array<double, 2>>& features);

}  // namespace hetps
