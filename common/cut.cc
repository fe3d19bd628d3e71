#include "common/cut.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/json_file.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

constexpr char kCutPrefix[] = "clock-";

// The clock in a cut folder's name, or -1 if the name is not one.
int64_t ClockOf(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind(kCutPrefix, 0) != 0 || name.size() == sizeof(kCutPrefix) - 1) return -1;
  const std::string digits = name.substr(sizeof(kCutPrefix) - 1);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::stoll(digits);
}

bool Complete(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kManifestName, ec);
}

// Cut folders under `checkpoint_dir`, by clock.
std::vector<std::pair<int64_t, fs::path>> Cuts(const std::string& checkpoint_dir) {
  std::vector<std::pair<int64_t, fs::path>> cuts;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
    const int64_t clock = entry.is_directory(ec) ? ClockOf(entry.path()) : -1;
    if (clock >= 0) cuts.emplace_back(clock, entry.path());
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

}  // namespace

std::string CutDir(const std::string& checkpoint_dir, int64_t clock) {
  return fmt::format("{}/{}{:09d}", checkpoint_dir, kCutPrefix, clock);
}

Status WriteManifest(const std::string& cut_dir, const proto::CutManifest& manifest) {
  return WriteJsonFile(cut_dir, kManifestName, manifest);
}

StatusOr<proto::CutManifest> ReadManifest(const std::string& cut_dir) {
  const std::string path = fmt::format("{}/{}", cut_dir, kManifestName);
  std::ifstream in(path);
  if (!in) {
    return Status::NotFound(fmt::format(
        "{} is not a complete checkpoint: it has no {} (the checkpoint was interrupted, or the "
        "folder is not one)",
        cut_dir, kManifestName));
  }
  std::stringstream text;
  text << in.rdbuf();
  proto::CutManifest manifest;
  if (!google::protobuf::util::JsonStringToMessage(text.str(), &manifest).ok()) {
    return Status::Malformed(fmt::format("{} is damaged: not a checkpoint manifest", path));
  }
  if (manifest.format() < 1 || manifest.format() > kCutFormat) {
    return Status::FailedPrecondition(fmt::format("{} has format {}; this build reads format {}",
                                                  path, manifest.format(), kCutFormat));
  }
  return manifest;
}

StatusOr<std::string> LatestCut(const std::string& path) {
  if (ClockOf(path) >= 0 || Complete(path)) {  // a cut's own folder
    if (auto m = ReadManifest(path); !m.ok()) return m.status();
    return path;
  }
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    return Status::NotFound(fmt::format("no checkpoint folder {}", path));
  }
  const auto cuts = Cuts(path);
  for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) {
    if (Complete(it->second)) return it->second.string();
  }
  return Status::NotFound(fmt::format("{} holds no complete checkpoint", path));
}

int PruneCuts(const std::string& checkpoint_dir, int keep) {
  if (keep <= 0) return 0;
  const auto cuts = Cuts(checkpoint_dir);
  int complete_seen = 0, removed = 0;
  for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) {  // newest first
    const bool complete = Complete(it->second);
    complete_seen += complete;
    const bool drop = complete ? complete_seen > keep : complete_seen > 0;
    std::error_code ec;
    if (drop && fs::remove_all(it->second, ec) > 0 && !ec) ++removed;
  }
  return removed;
}

}  // namespace hetps
