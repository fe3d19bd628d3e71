// When an edge client is reachable: its availability process, chosen by a spec string
// (--availability) from the registry below, seeded per client. Time is seconds since the client
// started; every client starts online.
//   always                      online throughout
//   onoff:on_s=A,off_s=B        alternating online and offline periods, each exponentially
//                               distributed with mean A (online) or B (offline), like the
//                               two-state availability models of device traces
//   trace:file=F,scale=S        online periods from a trace file: CSV rows "client,online_s,
//                               offline_s" (a header line may start with "client"), each an
//                               online period [online_s, offline_s) of trace client `client`
//                               (0, 1, ...); edge client i follows trace client i mod (the
//                               trace's clients); times x S; after the trace's span (its
//                               latest offline_s) the pattern repeats, so a short trace covers
//                               a long run
// A client that is offline does not check in; one that goes offline while it is selected
// abandons the round (it never reports the upload, so the round does not keep it). A new
// process is one file in availabilities/ with its Register function, its line in
// availabilities/availabilities.def, and its test.
//
// Thread-safety: none; owned by the client's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/registry.h"

namespace hetps {

class Availability {
 public:
  virtual ~Availability() = default;
  // The first time >= t at which the client is online (t itself when online then).
  virtual double NextOnline(double t) = 0;
  // Whether it stays online throughout [from, to].
  virtual bool OnlineThroughout(double from, double to) = 0;
  bool Online(double t) { return NextOnline(t) == t; }
};

// Whose availability: the seed of its process and its index among the training clients.
struct AvailabilityContext {
  uint64_t seed = 1;
  int client = 0;
};

struct AvailabilityEntry {
  std::function<StatusOr<std::unique_ptr<Availability>>(const AlgorithmSpec&,
                                                        const AvailabilityContext&)>
      make;
};
using AvailabilityRegistry = Registry<AvailabilityEntry>;

// Every availability process (availabilities/availabilities.def).
const AvailabilityRegistry& Availabilities();
// Fails on a bad spec, or a trace that cannot be read or gives some client no online period.
StatusOr<std::unique_ptr<Availability>> MakeAvailability(const std::string& spec, uint64_t seed,
                                                         int client = 0);

#define HETPS_AVAILABILITY(Name) void Register##Name(AvailabilityRegistry& r);
#include "worker/edge/availabilities/availabilities.def"
#undef HETPS_AVAILABILITY

}  // namespace hetps
