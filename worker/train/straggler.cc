#include "worker/train/straggler.h"

#include <cmath>
#include <random>

namespace hetps {
namespace {

// One stream per (seed, rank), whatever the other workers draw.
uint64_t StreamSeed(const StragglerContext& c) {
  return c.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(c.rank) * 0xBF58476D1CE4E5B9ull +
         0x94D049BB133111EBull;
}

class Constant final : public Straggler {
 public:
  explicit Constant(double factor) : factor_(factor) {}
  double FactorAt(int64_t) override { return factor_; }

 private:
  double factor_;
};

// A two-state process in iterations: each normal iteration starts a slow period with chance
// 1 / every and each slow iteration ends it with chance 1 / length, so the periods are
// geometric with those means.
class Transient final : public Straggler {
 public:
  Transient(double every, double length, double factor, uint64_t seed)
      : start_(1.0 / every), end_(1.0 / length), factor_(factor), rng_(seed) {}

  double FactorAt(int64_t iteration) override {
    while (at_ < iteration) {  // one draw per iteration, in order
      std::bernoulli_distribution flip(slow_ ? end_ : start_);
      if (flip(rng_)) slow_ = !slow_;
      ++at_;
    }
    return slow_ ? factor_ : 1.0;
  }

 private:
  double start_, end_, factor_;
  std::mt19937_64 rng_;
  bool slow_ = false;
  int64_t at_ = -1;  // the iteration the state is for
};

}  // namespace

const StragglerRegistry& Stragglers() {
  static const StragglerRegistry* r = [] {
    auto* r = new StragglerRegistry("straggler");
    r->Add({"none", "never slowed", {}}, {[](const AlgorithmSpec&, const StragglerContext&) {
             return std::unique_ptr<Straggler>(std::make_unique<Constant>(1.0));
           }});
    r->Add({"persistent",
            "always factor times slower",
            {ParamDef::Real("factor", "3", 1, 1000, "the slowdown")}},
           {[](const AlgorithmSpec& spec, const StragglerContext&) {
             return std::unique_ptr<Straggler>(std::make_unique<Constant>(spec.Number("factor")));
           }});
    r->Add(
        {"transient",
         "slow periods of mean `length` iterations between normal ones of mean `every`, "
         "factor times slower during them (a seeded two-state process)",
         {ParamDef::Real("every", "50", 1, 1e9, "mean iterations between slow periods"),
          ParamDef::Real("length", "10", 1, 1e9, "mean iterations of a slow period"),
          ParamDef::Real("factor", "4", 1, 1000, "the slowdown during a slow period")}},
        {[](const AlgorithmSpec& spec, const StragglerContext& c) {
          return std::unique_ptr<Straggler>(std::make_unique<Transient>(
              spec.Number("every"), spec.Number("length"), spec.Number("factor"), StreamSeed(c)));
        }});
    r->Add({"heterogeneous",
            "a persistent slowdown drawn once per worker, exp(spread |z|) with z standard normal",
            {ParamDef::Real("spread", "0.5", 0, 5, "the spread of the log-slowdowns")}},
           {[](const AlgorithmSpec& spec, const StragglerContext& c) {
             std::mt19937_64 rng(StreamSeed(c));
             std::normal_distribution<double> z(0, 1);
             const double factor = std::exp(spec.Number("spread") * std::abs(z(rng)));
             return std::unique_ptr<Straggler>(std::make_unique<Constant>(factor));
           }});
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
