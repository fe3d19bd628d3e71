// `hetps launch`'s argument parser and the -H host list on hostile arguments (the input split
// at NUL bytes): each either parses or says why. Arguments that read files (a flagfile, a run
// to resume, a hosts file) are left out: they read whatever path they name.
#include <cstdint>
#include <string>
#include <vector>

#include "cli/hosts.h"
#include "cli/launch_args.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  size_t start = 0;
  while (start <= input.size()) {
    const size_t end = std::min(input.find('\0', start), input.size());
    args.push_back(input.substr(start, end - start));
    start = end + 1;
  }
  for (const std::string& a : args) {
    if (a.find("flagfile") != std::string::npos || a.find("resume") != std::string::npos ||
        a.find("hosts") != std::string::npos) {
      return 0;
    }
  }
  (void)hetps::ParseLaunchArgs(args);
  (void)hetps::ParseHostList(input);
  return 0;
}
