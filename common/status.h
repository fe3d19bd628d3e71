// The wire side of Status (include/hetps/status.h): a StatusCode travels as proto::ErrorCode,
// number for number, so a server's error reaches the user unchanged.
#pragma once

#include "hetps.pb.h"
#include "hetps/status.h"

namespace hetps {

constexpr proto::ErrorCode ToWire(StatusCode code) { return static_cast<proto::ErrorCode>(code); }
// A code this build does not know (a newer peer's) reads as INTERNAL.
inline StatusCode FromWire(proto::ErrorCode code) {
  return proto::ErrorCode_IsValid(code) ? static_cast<StatusCode>(code) : StatusCode::kInternal;
}
inline bool operator==(proto::ErrorCode wire, StatusCode code) { return FromWire(wire) == code; }

}  // namespace hetps
