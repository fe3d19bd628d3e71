// Small files that must be whole or absent after a crash (a cut's or an export's manifest): a
// proto written as JSON through a temporary file that is synced, renamed over the name, and
// its directory synced.
#pragma once

#include <google/protobuf/message.h>

#include <string>

#include "common/status.h"

namespace hetps {

// fsync of a file or a directory; an error names the path.
Status SyncPath(const std::string& path);

// Writes <dir>/<name> as the JSON of `message` (proto field names, indented).
Status WriteJsonFile(const std::string& dir, const std::string& name,
                     const google::protobuf::Message& message);

}  // namespace hetps
