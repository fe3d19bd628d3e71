// transient:every=A,length=L,factor=F: slow periods between normal ones.
#include <random>

#include "worker/train/straggler.h"

namespace hetps {
namespace {

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

void RegisterTransientStraggler(StragglerRegistry& r) {
  r.Add({"transient",
         "slow periods of mean `length` iterations between normal ones of mean `every`, "
         "factor times slower during them (a seeded two-state process)",
         {ParamDef::Real("every", "50", 1, 1e9, "mean iterations between slow periods"),
          ParamDef::Real("length", "10", 1, 1e9, "mean iterations of a slow period"),
          ParamDef::Real("factor", "4", 1, 1000, "the slowdown during a slow period")}},
        {[](const AlgorithmSpec& spec, const StragglerContext& c) {
          return std::unique_ptr<Straggler>(
              std::make_unique<Transient>(spec.Number("every"), spec.Number("length"),
                                          spec.Number("factor"), StragglerStreamSeed(c)));
        }});
}

}  // namespace hetps
