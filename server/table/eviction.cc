#include "server/table/eviction.h"

#include <algorithm>
#include <vector>

namespace hetps {

const EvictionRegistry& Evictions() {
  static const EvictionRegistry* r = [] {
    auto* r = new EvictionRegistry("eviction");
#define HETPS_EVICTION(Name) Register##Name(*r);
#include "server/table/eviction/evictions.def"
#undef HETPS_EVICTION
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<EvictionPolicy>> MakeEviction(const std::string& text) {
  auto spec = Evictions().Parse(text);
  if (!spec.ok()) return spec.status();
  return Evictions().EntryFor(spec->name()).make(*spec);
}

void RowList::Links::Grow(uint32_t row) {
  if (row < prev.size()) return;
  const size_t size = std::max<size_t>(row + 1, prev.size() * 2);
  prev.resize(size, EvictionPolicy::kNone);
  next.resize(size, EvictionPolicy::kNone);
}

void RowList::PushFront(uint32_t row) {
  links_->Grow(row);
  links_->prev[row] = EvictionPolicy::kNone;
  links_->next[row] = head_;
  if (head_ != EvictionPolicy::kNone) links_->prev[head_] = row;
  head_ = row;
  if (tail_ == EvictionPolicy::kNone) tail_ = row;
}

void RowList::Remove(uint32_t row) {
  const uint32_t p = links_->prev[row], n = links_->next[row];
  (p != EvictionPolicy::kNone ? links_->next[p] : head_) = n;
  (n != EvictionPolicy::kNone ? links_->prev[n] : tail_) = p;
}

}  // namespace hetps
