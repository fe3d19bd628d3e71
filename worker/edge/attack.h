// Emulated Byzantine clients (ALGORITHMS.md §13): a share of a scenario's training clients
// (--byzantine_fraction) run an attack, chosen by a spec string (--attack) from the registry
// below, seeded per client:
//   sign_flip:factor=C     uploads -C x its honest delta
//   scale:factor=K         uploads K x its honest delta (a boosted update)
//   gaussian:std=S         uploads Gaussian noise of standard deviation S instead of its delta
//   label_flip             trains on its data with every label y replaced by classes - 1 - y
// Which clients attack: exactly round(F x clients) of the training clients, the first of a
// permutation of the client indices drawn from the scenario's seed, so a run's attackers are the
// same in every run and in either language (C++ edge clients, hetps.fed's Scenario). A new
// attack is one file in attacks/ with its Register function, its line in attacks/attacks.def,
// and its test.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/registry.h"

namespace hetps {

class Attack {
 public:
  virtual ~Attack() = default;
  // The client's labels before it trains (label_flip changes them).
  virtual void PoisonLabels(int32_t /*classes*/, std::vector<int32_t>& /*labels*/) {}
  // The update it uploads, one vector per tensor, in place; `rng` is the client's attack stream.
  virtual void PoisonUpdate(std::vector<std::vector<float>>& /*delta*/, std::mt19937_64& /*rng*/) {}
};

struct AttackEntry {
  std::function<std::unique_ptr<Attack>(const AlgorithmSpec&)> make;
};
using AttackRegistry = Registry<AttackEntry>;

// Every attack (attacks/attacks.def).
const AttackRegistry& Attacks();
StatusOr<std::unique_ptr<Attack>> MakeAttack(const std::string& spec);

// Whether training client `client` (0 .. clients-1) of a scenario seeded `seed` is one of the
// round(fraction x clients) attackers. REQUIRES: fraction in [0, 1].
bool IsByzantine(double fraction, uint64_t seed, int client, int clients);
// Fails on a fraction outside [0, 1] or a bad attack spec.
Status ValidateAttackFlags(double fraction, const std::string& attack);

#define HETPS_ATTACK(Name) void Register##Name(AttackRegistry& r);
#include "worker/edge/attacks/attacks.def"
#undef HETPS_ATTACK

}  // namespace hetps
