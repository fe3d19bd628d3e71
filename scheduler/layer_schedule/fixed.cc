#include "scheduler/layer_schedule/layer_schedule.h"

namespace hetps {
namespace {

// The temporally weighted scheme's split (Chen, Sun, Jin, TNNLS'19; ALGORITHMS.md §5) with
// fixed periods: the shallow layers (index < deep_from) every `shallow` steps, the deep ones
// every `deep` steps. deep_from=auto: the upper half of the layers is deep.
class FixedSchedule final : public LayerSchedulePolicy {
 public:
  FixedSchedule(int32_t shallow, int32_t deep, int32_t deep_from, bool mean)
      : shallow_(shallow), deep_(deep), deep_from_(deep_from), mean_(mean) {}

  std::vector<int32_t> Periods(const std::vector<LayerFigures>& layers,
                               const RunFigures&) override {
    const auto n = static_cast<int32_t>(layers.size());
    const int32_t from = deep_from_ >= 0 ? deep_from_ : (n + 1) / 2;
    std::vector<int32_t> periods(layers.size());
    for (int32_t l = 0; l < n; ++l) periods[l] = l < from ? shallow_ : deep_;
    return periods;
  }
  bool mean() const override { return mean_; }

 private:
  int32_t shallow_, deep_, deep_from_;  // deep_from_ < 0: auto
  bool mean_;
};

}  // namespace

void RegisterFixedSchedule(LayerScheduleRegistry& r) {
  ParamDef deep_from = ParamDef::Int("deep_from", "auto", 0, 1 << 20,
                                     "the first deep layer's index (auto: the upper half)");
  deep_from.words = {"auto"};
  r.Add({"fixed",
         "shallow layers every `shallow` steps, deep layers every `deep` steps (Chen et al., "
         "TNNLS'19)",
         {ParamDef::Int("shallow", "1", 1, 1024, "the shallow layers' push period in steps"),
          ParamDef::Int("deep", "4", 1, 1024, "the deep layers' push period in steps"), deep_from,
          CombineParam()}},
        {[](const AlgorithmSpec& spec) {
          const std::string& from = spec.Text("deep_from");
          return std::make_unique<FixedSchedule>(
              static_cast<int32_t>(spec.Number("shallow")),
              static_cast<int32_t>(spec.Number("deep")),
              from == "auto" ? -1 : static_cast<int32_t>(spec.Number("deep_from")),
              CombinesMean(spec));
        }});
}

}  // namespace hetps
