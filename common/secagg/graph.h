// Who shares masks and secrets with whom in a secure round (SecAgg+, Bell et al. CCS'20): a
// k-regular graph over the round's clients instead of the complete graph, so a client's cost
// grows with k = O(log n), not n. A secret (a client's self-mask seed or mask key) is shared
// t-of-(k+1) among its neighbours (points 1..k) and the client itself (point k+1, used only for
// its own self-mask seed when it is kept); the servers can rebuild it from any t.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace hetps::secagg {

// Shares lie at the points 1..255 of GF(2^8), one per neighbour and one for the owner: k is at
// most 254.
constexpr int kMaxNeighbours = 254;

struct GraphParams {
  int neighbours = 0;  // k
  int threshold = 0;   // t
};

// The parameters for a round of n clients of which a share `dropout` may drop after masking:
// t = floor((k+1)/2) + 1 (more than half the k+1 holders, so that no two disjoint sets of holders
// can give a lying server both secrets of one client), and the smallest even k of at least
// LeastNeighbours(n)
// whose chance that any of the n secrets finds fewer than t of its k neighbours alive,
// n * P[Binomial(k, 1 - dropout) < t], is at most `failure`; k = n - 1 (the complete graph,
// SecAgg itself) when no smaller k does.
GraphParams ChooseParams(int n, double dropout, double failure = 1e-3);

// The fewest neighbours a client gets, 3 ceil(log2 n) rounded up to even (SecAgg+'s k = O(log n)):
// fewer than t = k/2 + 1 of them, colluding with the servers, learn nothing of its update.
int LeastNeighbours(int n);
// P[Binomial(k, p) < t].
double BinomialBelow(int k, double p, int t);

// The neighbours of every member (each list sorted): the members in an order drawn from `seed`
// on a ring, each joined to the k/2 nearest on either side (a Harary graph); the complete graph
// when k >= members - 1. Symmetric: v is u's neighbour exactly when u is v's.
std::map<int32_t, std::vector<int32_t>> Neighbours(std::vector<int32_t> members, int k,
                                                   uint64_t seed);

// The threshold for k neighbours: floor((k+1)/2) + 1.
int Threshold(int k);
// Where `v`'s share of `owner`'s secrets lies: 1 + v's place among owner's neighbours, k + 1 for
// the owner itself; 0 when v is neither.
uint8_t SharePoint(const std::vector<int32_t>& owner_neighbours, int32_t owner, int32_t v);

}  // namespace hetps::secagg
