#include "common/json_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace hetps {

Status SyncPath(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Internal(fmt::format("cannot open {} to sync it", path));
  const bool ok = fsync(fd) == 0;
  close(fd);
  return ok ? Status() : Status::Internal(fmt::format("cannot sync {}", path));
}

Status WriteJsonFile(const std::string& dir, const std::string& name,
                     const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) {
    return Status::Internal(fmt::format("cannot encode {}", name));
  }
  const std::string path = fmt::format("{}/{}", dir, name);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json;
    if (!out.flush()) return Status::Internal(fmt::format("cannot write {}", tmp));
  }
  if (Status s = SyncPath(tmp); !s.ok()) return s;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Internal(fmt::format("cannot rename {} to {}", tmp, path));
  }
  return SyncPath(dir);
}

}  // namespace hetps
