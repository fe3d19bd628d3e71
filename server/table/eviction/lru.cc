#include "server/table/eviction.h"

namespace hetps {
namespace {

// Least recently used: every touch moves the row to the front; the victim is at the back.
class Lru final : public EvictionPolicy {
 public:
  void Inserted(uint32_t row) override { list_.PushFront(row); }
  void Touched(uint32_t row) override {
    list_.Remove(row);
    list_.PushFront(row);
  }
  void Erased(uint32_t row) override { list_.Remove(row); }
  uint32_t Victim() const override { return list_.empty() ? kNone : list_.back(); }
  int64_t bytes() const override {
    return static_cast<int64_t>((links_.prev.capacity() + links_.next.capacity()) *
                                sizeof(uint32_t));
  }

 private:
  RowList::Links links_;
  RowList list_{&links_};
};

}  // namespace

void RegisterLru(EvictionRegistry& r) {
  r.Add({"lru", "least recently used: drops the row whose last pull or push is oldest", {}},
        {[](const AlgorithmSpec&) { return std::make_unique<Lru>(); }});
}

}  // namespace hetps
