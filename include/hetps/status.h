// Status: an error code and a message, returned across module boundaries. Nothing in hetps
// fails silently: a function that can fail returns Status or StatusOr<T>.
//
// Part of hetps's public API (installed as <hetps/status.h>).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <variant>

namespace hetps {

// A server's error reaches the user unchanged: these are the numbers of the wire's error codes.
enum class StatusCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kSizeMismatch = 3,
  kDtypeMismatch = 4,
  kMalformed = 5,
  kUnregistered = 6,
  kUnavailable = 7,
  kFailedPrecondition = 8,
  kInternal = 9,
  kAborted = 10,
  kDeadlineExceeded = 11,
  kPermissionDenied = 12,  // the peer's key may not do this (auth "curve")
};

// "SIZE_MISMATCH", as the wire and the Python exceptions spell it.
const char* StatusCodeName(StatusCode code);
inline std::ostream& operator<<(std::ostream& out, StatusCode code) {
  return out << StatusCodeName(code);
}

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status SizeMismatch(std::string m) { return {StatusCode::kSizeMismatch, std::move(m)}; }
  static Status DtypeMismatch(std::string m) { return {StatusCode::kDtypeMismatch, std::move(m)}; }
  static Status Malformed(std::string m) { return {StatusCode::kMalformed, std::move(m)}; }
  static Status Unregistered(std::string m) { return {StatusCode::kUnregistered, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "SIZE_MISMATCH: partition 3 expects 1024 elements, got 1000"
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-OK Status.
template <typename T>
class StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {}  // NOLINT: REQUIRES: !status.ok()
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hetps
