#include "worker/train/straggler.h"

namespace hetps {
namespace {

class Constant final : public Straggler {
 public:
  explicit Constant(double factor) : factor_(factor) {}
  double FactorAt(int64_t) override { return factor_; }

 private:
  double factor_;
};

}  // namespace

uint64_t StragglerStreamSeed(const StragglerContext& c) {
  return c.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(c.rank) * 0xBF58476D1CE4E5B9ull +
         0x94D049BB133111EBull;
}

std::unique_ptr<Straggler> ConstantStraggler(double factor) {
  return std::make_unique<Constant>(factor);
}

const StragglerRegistry& Stragglers() {
  static const StragglerRegistry* r = [] {
    auto* r = new StragglerRegistry("straggler");
#define HETPS_STRAGGLER(Name) Register##Name(*r);
#include "worker/train/stragglers/stragglers.def"
#undef HETPS_STRAGGLER
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<Straggler>> MakeStraggler(const std::string& text, uint64_t seed,
                                                   int rank) {
  auto spec = Stragglers().Parse(text);
  if (!spec.ok()) return spec.status();
  return Stragglers().EntryFor(spec->name()).make(*spec, {.seed = seed, .rank = rank});
}

}  // namespace hetps
