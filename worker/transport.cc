#include "worker/transport.h"

#include <fmt/format.h>

namespace hetps {

const std::vector<TransportInfo>& Transports() {
  static const std::vector<TransportInfo> all = {ShmTransportInfo(), CmaTransportInfo()};
  return all;
}

StatusOr<std::vector<const TransportInfo*>> TransportsFor(const std::string& choice) {
  std::vector<const TransportInfo*> out;
  std::string names = "auto, socket";
  for (const TransportInfo& t : Transports()) {
    if (choice == "auto" || choice == t.name) out.push_back(&t);
    names += ", " + t.name;
  }
  if (choice != "socket" && out.empty()) {
    return Status::InvalidArgument(fmt::format("transport '{}': not one of {}", choice, names));
  }
  return out;
}

}  // namespace hetps
