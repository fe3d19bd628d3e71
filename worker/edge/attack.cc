#include "worker/edge/attack.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hetps {

const AttackRegistry& Attacks() {
  static const AttackRegistry* r = [] {
    auto* r = new AttackRegistry("attack");
#define HETPS_ATTACK(Name) Register##Name(*r);
#include "worker/edge/attacks/attacks.def"
#undef HETPS_ATTACK
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<Attack>> MakeAttack(const std::string& text) {
  auto spec = Attacks().Parse(text);
  if (!spec.ok()) return spec.status();
  return Attacks().EntryFor(spec->name()).make(*spec);
}

bool IsByzantine(double fraction, uint64_t seed, int client, int clients) {
  if (clients <= 0 || client < 0 || client >= clients) return false;
  const int attackers = static_cast<int>(std::lround(fraction * clients));
  std::vector<int> order(static_cast<size_t>(clients));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed * 1000003 + 977);
  std::shuffle(order.begin(), order.end(), rng);
  return std::find(order.begin(), order.begin() + attackers, client) != order.begin() + attackers;
}

Status ValidateAttackFlags(double fraction, const std::string& attack) {
  if (!(fraction >= 0 && fraction <= 1)) {
    return Status::InvalidArgument(
        fmt::format("--byzantine_fraction must be in [0, 1], got {}", fraction));
  }
  return MakeAttack(attack).status();
}

}  // namespace hetps
