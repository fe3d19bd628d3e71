#include "server/table/eviction.h"

namespace hetps {
namespace {

// No eviction: a full shard refuses a push that needs a new row (with an error naming the
// table and its max_rows); rows already there keep training.
class NoEviction final : public EvictionPolicy {
 public:
  void Inserted(uint32_t) override {}
  void Touched(uint32_t) override {}
  void Erased(uint32_t) override {}
  bool drops() const override { return false; }
  uint32_t Victim() const override { return kNone; }
  int64_t bytes() const override { return 0; }
};

}  // namespace

void RegisterNoEviction(EvictionRegistry& r) {
  r.Add({"none", "no eviction: past max_rows a push that needs a new row is refused", {}},
        {[](const AlgorithmSpec&) { return std::make_unique<NoEviction>(); }});
}

}  // namespace hetps
