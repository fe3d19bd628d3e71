#include "scheduler/selection/selection.h"

namespace hetps {

#define HETPS_SELECTION(Name) void Register##Name(SelectionRegistry& r);
#include "scheduler/selection/selections.def"
#undef HETPS_SELECTION

const SelectionRegistry& Selections() {
  static const SelectionRegistry* r = [] {
    auto* r = new SelectionRegistry("selection");
#define HETPS_SELECTION(Name) Register##Name(*r);
#include "scheduler/selection/selections.def"
#undef HETPS_SELECTION
    return r;
  }();
  return *r;
}

StatusOr<std::unique_ptr<SelectionPolicy>> MakeSelection(const std::string& text) {
  auto spec = Selections().Parse(text);
  if (!spec.ok()) return spec.status();
  return Selections().EntryFor(spec->name()).make(*spec);
}

}  // namespace hetps
