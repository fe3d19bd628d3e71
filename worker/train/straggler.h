// How much slower than its own compute a training worker runs at each iteration: its straggler
// process, chosen by a spec string (hetps-worker --straggler) from the registry below, seeded by
// (seed, rank) so a run is reproducible and every worker has its own draw.
//   none                              never slowed
//   persistent:factor=F               always F times slower (one slow worker: give it to one rank)
//   transient:every=A,length=L,factor=F
//                                     slow periods: normal stretches of mean A iterations and
//                                     slow ones of mean L iterations (each geometrically
//                                     distributed), F times slower during a slow one; the mean
//                                     slowdown is (A + L F) / (A + L)
//   heterogeneous:spread=S            a speed drawn once per worker: exp(S |z|), z standard
//                                     normal, so workers differ persistently and none is faster
//                                     than its compute
// The trainer sleeps (factor - 1) times the iteration's measured compute after computing, so a
// straggler leaves the CPU to the others (on a machine with fewer cores than workers a spinning
// straggler would slow everyone). A new process is one file in stragglers/ with its Register
// function, its line in stragglers/stragglers.def, and its test.
//
// Thread-safety: none; owned by the training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/registry.h"

namespace hetps {

class Straggler {
 public:
  virtual ~Straggler() = default;
  // The slowdown (>= 1) of iteration `iteration`; called with increasing iterations.
  virtual double FactorAt(int64_t iteration) = 0;
};

struct StragglerContext {
  uint64_t seed = 1;
  int rank = 0;
};

struct StragglerEntry {
  std::function<std::unique_ptr<Straggler>(const AlgorithmSpec&, const StragglerContext&)> make;
};
using StragglerRegistry = Registry<StragglerEntry>;

// Every straggler process (stragglers/stragglers.def).
const StragglerRegistry& Stragglers();
StatusOr<std::unique_ptr<Straggler>> MakeStraggler(const std::string& spec, uint64_t seed,
                                                   int rank);

// For the processes' files: one random stream per (seed, rank), whatever the other workers
// draw; and a constant slowdown.
uint64_t StragglerStreamSeed(const StragglerContext& context);
std::unique_ptr<Straggler> ConstantStraggler(double factor);

#define HETPS_STRAGGLER(Name) void Register##Name(StragglerRegistry& r);
#include "worker/train/stragglers/stragglers.def"
#undef HETPS_STRAGGLER

}  // namespace hetps
