// When an edge client is reachable: its availability process, chosen by a spec string
// (--availability) from the registry below, seeded per client. Time is seconds since the client
// started; every client starts online.
//   always                      online throughout
//   onoff:on_s=A,off_s=B        alternating online and offline periods, each exponentially
//                               distributed with mean A (online) or B (offline), like the
//                               two-state availability models of device traces
// A client that is offline does not check in; one that goes offline while it is selected
// abandons the round (it never reports the upload, so the round does not keep it). A new
// process is one Register function here and its test.
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

struct AvailabilityEntry {
  std::function<std::unique_ptr<Availability>(const AlgorithmSpec&, uint64_t seed)> make;
};
using AvailabilityRegistry = Registry<AvailabilityEntry>;

const AvailabilityRegistry& Availabilities();
StatusOr<std::unique_ptr<Availability>> MakeAvailability(const std::string& spec, uint64_t seed);

}  // namespace hetps
