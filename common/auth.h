// Authentication and encryption of the cluster's ZeroMQ sockets: ZeroMQ CURVE (libzmq built
// with libsodium), with an allow-list of public keys checked by a ZAP handler in every process
// that listens (the scheduler, the servers).
//
// Key material (`hetps keygen --out DIR`, see WriteKeys) is a folder of text files:
//   <name>.key  a key pair: "role = ROLE", "public = Z85", "secret = Z85" (mode 0600; whoever
//               reads it can act as ROLE)
//   <name>.pub  the same without the secret
//   allow       one admitted key per line: "ROLE Z85-PUBLIC-KEY NAME"; a line starting with
//               '#' is a comment (only there: '#' is a Z85 digit)
// A role's default pair is named after the role (worker.key, ...); per-node pairs are more
// names of the same roles. Every node needs its own .key and scheduler.pub; the scheduler and
// the servers also read `allow`. Workers learn each server's public key from the cluster view
// (the scheduler announces the key each server authenticated with).
//
// The scheduler and the servers read `allow` again on SIGHUP (AllowList::Reload): a key added
// is admitted from its next handshake on, a key removed is refused from then on (its open
// connection too, message by message, where a role is checked per message: the scheduler).
//
// Thread-safety: Auth is immutable once loaded and may be shared. An AllowList's copies share
// one set of entries, which Reload replaces while other threads read it. ZapHandler owns its
// thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"

namespace hetps {

// What a key may do: kWorker push/pull and join; kServer hold shards; kOperator `hetps ctl`,
// `hetps status`; kScheduler is the key the scheduler proves itself with (and reads the
// status with, for its health check).
enum class KeyRole { kScheduler, kServer, kWorker, kOperator };
std::string_view KeyRoleName(KeyRole role);
StatusOr<KeyRole> ParseKeyRole(std::string_view name);

struct CurveKey {
  std::string name;  // the file's base name (e.g. "worker", "edge-7")
  KeyRole role = KeyRole::kWorker;
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85; empty when read from a .pub
};

// A new key pair (zmq_curve_keypair).
StatusOr<CurveKey> NewCurveKey(std::string name, KeyRole role);
// Reads a .key (with_secret) or .pub file; every field is checked, the secret against the
// public key.
StatusOr<CurveKey> ReadCurveKey(const std::string& path, bool with_secret);

// The admitted public keys, each with its role and name. Copies share the entries.
class AllowList {
 public:
  static StatusOr<AllowList> Read(const std::string& path);
  // The entry of `public_key` (Z85), if listed.
  std::optional<CurveKey> Find(const std::string& public_key) const;
  // Its role alone, copying nothing: what is asked of every message.
  std::optional<KeyRole> RoleOf(const std::string& public_key) const;
  size_t size() const;
  void Add(CurveKey key);
  // Reads the file Read read again and, only when all of it is good, makes it the list every
  // copy sees; a bad file changes nothing (the error says why). Returns what changed, e.g.
  // "4 keys (1 added, 0 removed)".
  StatusOr<std::string> Reload();

 private:
  using Keys = std::map<std::string, CurveKey>;  // by public key
  static StatusOr<Keys> Parse(const std::string& path);
  struct Shared {
    mutable std::shared_mutex mu;
    Keys keys;
    std::string path;
  };
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

// What one process needs to secure its sockets. With `curve` false every call is a no-op and
// the wire is plain TCP, as on loopback clusters.
struct Auth {
  bool curve = false;
  CurveKey own;
  std::string scheduler_public;  // what the scheduler must prove; all but the scheduler
  AllowList allow;               // who may connect; the scheduler and servers

  // Before connect: `socket` talks only to the holder of `peer_public`'s secret, as `own`.
  Status SecureClient(zmq::socket_t& socket, const std::string& peer_public) const;
  // Before bind: `socket` is a CURVE server in ZAP domain `domain` (a ZapHandler of its
  // context decides who is admitted).
  void SecureServer(zmq::socket_t& socket, const std::string& domain) const;
  // The role of the peer key a message arrived with (Envelope::peer): nullopt when auth is off
  // or the key is not listed.
  std::optional<KeyRole> RoleOf(const std::string& peer) const;
  // For a listening process's start line: "CURVE, 3 keys admitted" or "no authentication".
  std::string Describe() const;
};

// The --auth, --keys and --key flags every role takes.
struct AuthFlags {
  std::string mode = "none";  // none | curve
  std::string keys_dir;       // what `hetps keygen` wrote
  std::string key_name;       // the pair to use: DIR/<key_name>.key; default the role's name
};
// Whether the flags make sense together (a known mode, keys with curve and only then), without
// reading any file (a daemon's --check_flags).
Status ValidateAuthFlags(const AuthFlags& flags);
// Loads what a process of `role` needs from flags.keys_dir: its pair (which must be of `role`),
// the scheduler's public key (all but the scheduler), the allow-list (the scheduler, servers).
// No role (an operator's command): a pair of any role, and the scheduler's public key.
StatusOr<Auth> LoadAuth(const AuthFlags& flags, std::optional<KeyRole> role);

// Refuses to listen on `endpoint` when it is reachable from other machines (not loopback, ipc
// or inproc) and auth is off, unless `insecure` says the operator accepts that; the message
// says how to secure it.
Status CheckListenEndpoint(const std::string& endpoint, const Auth& auth, bool insecure);

// `hetps keygen`: creates DIR (mode 0700) with a pair for each role and the allow-list of all
// four (the scheduler's key connects only to read the status, for its health check), or, when
// DIR already holds key material, adds pairs named in `add` (role, name) to it. Refuses to
// overwrite an existing pair. Returns the files written.
StatusOr<std::vector<std::string>> WriteKeys(const std::string& dir,
                                             const std::vector<CurveKey>& add);

// The ZAP handler of one context (ZeroMQ RFC 27): for each CURVE handshake on a server socket,
// admits the client key only when the allow-list holds it with a role its socket's domain takes
// (`domains`: domain -> roles). Admitted peers' messages carry their public key as User-Id
// (Envelope::peer). A refusal is logged with the peer's address (the first 20, then every
// 1000th); the peer's messages never reach the socket.
class ZapHandler {
 public:
  // Binds the context's ZAP endpoint before returning, so no CURVE server socket of `context`
  // can admit a peer unchecked; `allow` must outlive the handler.
  ZapHandler(zmq::context_t& context, const AllowList& allow,
             std::map<std::string, std::set<KeyRole>> domains);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  uint64_t admitted() const { return admitted_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  void Run();
  // The reply's status code and, when admitted, the user id.
  std::pair<std::string, std::string> Decide(const std::string& domain, const std::string& address,
                                             const std::string& mechanism,
                                             const std::string& credential);

  zmq::socket_t socket_;
  const AllowList& allow_;
  std::map<std::string, std::set<KeyRole>> domains_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> admitted_{0}, refused_{0};
  std::thread thread_;
};

}  // namespace hetps
