#include "common/status.h"

namespace hetps {

std::string Status::ToString() const {
  if (ok()) return "OK";
  return proto::ErrorCode_Name(code_) + ": " + message_;
}

}  // namespace hetps
