#include "common/dial.h"

#include <fmt/format.h>

#include "common/message.h"

namespace hetps {

StatusOr<zmq::socket_t> Dial(zmq::context_t& context, int32_t self, const std::string& address,
                             const Auth& auth, const std::string& peer_key) {
  zmq::socket_t sock(context, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::routing_id, NodeIdentity(self));
  sock.set(zmq::sockopt::sndhwm, 0);
  sock.set(zmq::sockopt::rcvhwm, 0);
  sock.set(zmq::sockopt::linger, 0);
  if (Status s = auth.SecureClient(sock, peer_key); !s.ok()) return s;
  try {
    sock.connect(address);
  } catch (const zmq::error_t& e) {
    return Status::Malformed(fmt::format("address '{}': {}", address, e.what()));
  }
  return sock;
}

}  // namespace hetps
