#include "common/data_dir.h"

#include <fmt/format.h>

#include <filesystem>

namespace hetps {

StatusOr<bool> PrepareDataDir(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool fresh = !fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec));
  if (!fresh && !fs::is_directory(dir, ec)) {
    return Status::InvalidArgument(fmt::format("{} {} is not a folder", what, dir));
  }
  if (!fresh && !fs::exists(fs::path(dir) / "CURRENT", ec)) {
    return Status::FailedPrecondition(fmt::format(
        "{} {} is not empty and holds no hetps data (no RocksDB CURRENT file); refusing to start "
        "on it as an empty model or a new cluster",
        what, dir));
  }
  if (fresh && (fs::create_directories(dir, ec), ec)) {
    return Status::InvalidArgument(fmt::format("cannot create {} {}: {}", what, dir, ec.message()));
  }
  return fresh;
}

}  // namespace hetps
