// Transport: how a data request's values travel between this worker and one server. By
// default they ride in frames on the server's socket (tcp:// or ipc://), which needs nothing
// from here. A server on the same machine is reached faster through one of the transports
// registered in transport.cc, each in its own file (gloo style):
//
//   shm  worker/transport_shm.cc  a shared memory segment this worker makes and the server
//                                 maps: a push is copied in here, a pull copied out here
//   cma  worker/transport_cma.cc  the server reads and writes the caller's arrays itself
//                                 (cross memory attach): one copy per push or pull, none here
//
// ClientIo picks one per server from the cluster view (the same host and an address of this
// network namespace), trying them in that order (ClientOptions::transport); headers, replies
// and their order stay on the socket, and a request a transport does not take goes in frames.
// shm comes first: on one 2-core machine it is as fast or faster up to a 16 MB model, where
// its copies stay in cache; cma, with a copy fewer, is faster beyond (bench/pushpull.cc).
//
// Thread-safety: none; the client's I/O thread owns every transport.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "hetps.pb.h"
#include "hetps/client.h"
#include "worker/client_report.h"

namespace hetps {

struct Outgoing;

// What a request took outside the socket, kept with it until it is over.
struct TransportSlot {
  int64_t offset = -1;  // shm: the slot in the segment
  int64_t length = 0;   // bytes that travel outside the socket; 0: none (frames)
  // cma: the server may read or write the caller's memory until it answers this request.
  bool lent = false;
  std::shared_ptr<const void> keep;  // memory the request names that must outlive it
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;

  // Takes a PUSH/INIT's payload or a PULL's values off the socket when it can, marking the
  // header and filling `slot`; otherwise leaves `o` as it is (the values go in frames).
  // REQUIRES: attached().
  virtual void Prepare(Outgoing& o, TransportSlot& slot) = 0;
  // A PULL_REPLY to a request Prepare took, whose header says its values came this way:
  // checks it and makes sure the `bytes` of values are in `dst`.
  virtual Status AcceptPull(const proto::Header& h, const TransportSlot& slot, float* dst,
                            size_t bytes) = 0;
  // The request is over (answered or failed); its slot may be reused.
  virtual void Release(const TransportSlot& slot) = 0;

  // The server died or was declared dead: nothing more is prepared here, and what it may
  // still touch is never reused (a restarted server is reached through its socket).
  void Detach() { attached_ = false; }
  bool attached() const { return attached_; }
  // For transports that lend the caller's memory (slot.lent): whether the server can no
  // longer touch it, because its process exited or it answered CMA_REVOKE.
  virtual bool Released() const { return true; }
  virtual void OnRevoked() {}

 protected:
  bool attached_ = true;
};

// What opening a transport to one server needs.
struct TransportContext {
  const ClientOptions& options;
  ClientReport& report;
  uint64_t incarnation = 0;  // this client's, for names
  int server_rank = 0;
  // One request and its answer on the server's socket, before the I/O thread starts (an
  // ERROR answer comes back as its Status).
  std::function<StatusOr<proto::Header>(proto::Header)> ask;
};

struct TransportInfo {
  std::string name;
  std::string summary;
  // Opens it to the server of `context`, or says why not (the next one is tried).
  std::function<StatusOr<std::unique_ptr<Transport>>(const TransportContext&)> open;
};

// The registered transports, in the order ClientIo tries them.
const std::vector<TransportInfo>& Transports();
// ClientOptions::transport: "auto" (every registered one, in order), "socket" (none), or one
// name. Checks the word; the transports to try, in order.
StatusOr<std::vector<const TransportInfo*>> TransportsFor(const std::string& choice);

// Each transport's file defines its registration.
TransportInfo ShmTransportInfo();
TransportInfo CmaTransportInfo();

}  // namespace hetps
