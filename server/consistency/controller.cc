#include "server/consistency/controller.h"

namespace hetps {

const char* ScheduleName(ApplySchedule schedule) {
  switch (schedule) {
    case ApplySchedule::kOnArrival:
      return "pushes applied on arrival";
    case ApplySchedule::kWindowed:
      return "pushes applied in windows";
    case ApplySchedule::kLockstepRounds:
      return "lockstep rounds of every worker";
    case ApplySchedule::kQuorumRounds:
      return "rounds of the first K workers";
    case ApplySchedule::kScheduledRounds:
      return "rounds the scheduler closes";
    case ApplySchedule::kCommitted:
      return "uploads the scheduler commits";
  }
  return "?";
}

std::vector<ApplySchedule> EverySchedule() {
  return {ApplySchedule::kOnArrival,       ApplySchedule::kWindowed,
          ApplySchedule::kLockstepRounds,  ApplySchedule::kQuorumRounds,
          ApplySchedule::kScheduledRounds, ApplySchedule::kCommitted};
}

bool SchedulerRunsRounds(ApplySchedule schedule) {
  return schedule == ApplySchedule::kScheduledRounds || schedule == ApplySchedule::kCommitted;
}

const ControllerRegistry& Controllers() {
  static const ControllerRegistry* r = [] {
    auto* r = new ControllerRegistry("consistency");
#define HETPS_CONTROLLER(Name) Register##Name(*r);
#include "server/consistency/controllers.def"
#undef HETPS_CONTROLLER
    return r;
  }();
  return *r;
}

std::vector<std::string> ClockDrivenControllers() {
  std::vector<std::string> names;
  for (const std::string& name : Controllers().Names()) {
    if (!SchedulerRunsRounds(Controllers().EntryFor(name).schedule)) names.push_back(name);
  }
  return names;
}

std::unique_ptr<ConsistencyController> MakeController(const AlgorithmSpec& spec,
                                                      const std::vector<int32_t>& workers) {
  return Controllers().EntryFor(spec.name()).make(spec, workers);
}

StatusOr<std::unique_ptr<ConsistencyController>> MakeController(
    const std::string& text, const std::vector<int32_t>& workers) {
  auto spec = Controllers().Parse(text);
  if (!spec.ok()) return spec.status();
  return MakeController(*spec, workers);
}

}  // namespace hetps
