// Status: an error code and a message, returned across module boundaries. Nothing in hetps
// fails silently: a function that can fail returns Status or StatusOr<T>.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "hetps.pb.h"

namespace hetps {

// The codes are the wire's ErrorCode, so a server's error reaches the user unchanged.
using StatusCode = proto::ErrorCode;

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {proto::INVALID_ARGUMENT, std::move(m)}; }
  static Status NotFound(std::string m) { return {proto::NOT_FOUND, std::move(m)}; }
  static Status SizeMismatch(std::string m) { return {proto::SIZE_MISMATCH, std::move(m)}; }
  static Status DtypeMismatch(std::string m) { return {proto::DTYPE_MISMATCH, std::move(m)}; }
  static Status Malformed(std::string m) { return {proto::MALFORMED, std::move(m)}; }
  static Status Unregistered(std::string m) { return {proto::UNREGISTERED, std::move(m)}; }
  static Status Unavailable(std::string m) { return {proto::UNAVAILABLE, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {proto::FAILED_PRECONDITION, std::move(m)};
  }
  static Status Internal(std::string m) { return {proto::INTERNAL, std::move(m)}; }
  static Status Aborted(std::string m) { return {proto::ABORTED, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {proto::DEADLINE_EXCEEDED, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {proto::PERMISSION_DENIED, std::move(m)}; }

  bool ok() const { return code_ == proto::OK; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "SIZE_MISMATCH: partition 3 expects 1024 elements, got 1000"
  std::string ToString() const;

 private:
  StatusCode code_ = proto::OK;
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
