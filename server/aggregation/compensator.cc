#include "server/aggregation/compensator.h"

#include <set>
#include <string>

namespace hetps {

const CompensatorRegistry& Compensators() {
  static const CompensatorRegistry* r = [] {
    auto* r = new CompensatorRegistry("compensator");
#define HETPS_COMPENSATOR(Name) Register##Name(*r);
#include "server/aggregation/compensators.def"
#undef HETPS_COMPENSATOR
    return r;
  }();
  return *r;
}

std::vector<ParamDef> CompensationParams() {
  std::vector<std::string> names = {"none"};
  for (const std::string& name : Compensators().Names()) names.push_back(name);
  std::vector<ParamDef> params = {ParamDef::Choice(
      "compensation", "none", names,
      "delay compensation of each gradient (compensators: `hetps-server --list`)")};
  std::set<std::string> seen;
  for (const std::string& name : Compensators().Names()) {
    for (const ParamDef& p : Compensators().Find(name)->params) {
      if (seen.insert(p.name).second) params.push_back(p);
    }
  }
  return params;
}

std::unique_ptr<Compensator> MakeCompensator(const AlgorithmSpec& spec) {
  if (spec.Is("compensation", "none")) return nullptr;
  return Compensators().EntryFor(spec.Text("compensation")).make(spec);
}

}  // namespace hetps
