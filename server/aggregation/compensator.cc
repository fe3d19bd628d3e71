#include "server/aggregation/compensator.h"

#include <map>
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
  // Each compensator's parameters act only when it is the one chosen (a name two declare acts
  // with either).
  std::map<std::string, ParamDef> own;
  std::vector<std::string> order;
  for (const std::string& name : Compensators().Names()) {
    for (const ParamDef& p : Compensators().Find(name)->params) {
      auto [it, added] = own.emplace(p.name, p.OnlyWith("compensation", {}));
      if (added) order.push_back(p.name);
      it->second.when_values.push_back(name);
    }
  }
  for (const std::string& name : order) params.push_back(own.at(name));
  return params;
}

std::unique_ptr<Compensator> MakeCompensator(const AlgorithmSpec& spec) {
  if (spec.Is("compensation", "none")) return nullptr;
  return Compensators().EntryFor(spec.Text("compensation")).make(spec);
}

}  // namespace hetps
