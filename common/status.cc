#include "common/status.h"

namespace hetps {

// The public enum and the wire's must agree number for number.
static_assert(ToWire(StatusCode::kOk) == proto::OK);
static_assert(ToWire(StatusCode::kInvalidArgument) == proto::INVALID_ARGUMENT);
static_assert(ToWire(StatusCode::kNotFound) == proto::NOT_FOUND);
static_assert(ToWire(StatusCode::kSizeMismatch) == proto::SIZE_MISMATCH);
static_assert(ToWire(StatusCode::kDtypeMismatch) == proto::DTYPE_MISMATCH);
static_assert(ToWire(StatusCode::kMalformed) == proto::MALFORMED);
static_assert(ToWire(StatusCode::kUnregistered) == proto::UNREGISTERED);
static_assert(ToWire(StatusCode::kUnavailable) == proto::UNAVAILABLE);
static_assert(ToWire(StatusCode::kFailedPrecondition) == proto::FAILED_PRECONDITION);
static_assert(ToWire(StatusCode::kInternal) == proto::INTERNAL);
static_assert(ToWire(StatusCode::kAborted) == proto::ABORTED);
static_assert(ToWire(StatusCode::kDeadlineExceeded) == proto::DEADLINE_EXCEEDED);
static_assert(ToWire(StatusCode::kPermissionDenied) == proto::PERMISSION_DENIED);
static_assert(proto::ErrorCode_MAX == proto::PERMISSION_DENIED);

const char* StatusCodeName(StatusCode code) { return proto::ErrorCode_Name(ToWire(code)).c_str(); }

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace hetps
