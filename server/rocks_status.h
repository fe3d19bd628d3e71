// A RocksDB status as hetps's: OK, or Internal naming what was being done.
#pragma once

#include <fmt/format.h>
#include <rocksdb/status.h>

#include <string>

#include "common/status.h"

namespace hetps {

inline Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status();
  return Status::Internal(fmt::format("{}: {}", what, s.ToString()));
}

}  // namespace hetps
