#include "common/auth.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <zmq_addon.hpp>

namespace hetps {
namespace {

constexpr size_t kZ85KeyChars = 40;  // a 32-byte key in Z85
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";

std::string Trimmed(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

bool IsZ85Key(const std::string& s) {
  if (s.size() != kZ85KeyChars) return false;
  std::array<uint8_t, 32> raw{};
  return zmq_z85_decode(raw.data(), s.c_str()) != nullptr;
}

bool ValidKeyName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name == "allow") return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return name.front() != '.';
}

// Writes `text` to a new file `path` with `mode`; fails if it exists.
Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return Status::InvalidArgument(fmt::format("cannot create {}: {}", path, strerror(errno)));
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  close(fd);
  if (!ok) return Status::Internal(fmt::format("cannot write {}: {}", path, strerror(err)));
  return Status();
}

std::string KeyFileText(const CurveKey& k, bool with_secret) {
  std::string text =
      with_secret ? fmt::format(
                        "# hetps CURVE key pair (hetps keygen). Secret: whoever can read this "
                        "file is a {} of the cluster.\n",
                        KeyRoleName(k.role))
                  : "# hetps CURVE public key (hetps keygen).\n";
  text += fmt::format("role = {}\npublic = {}\n", KeyRoleName(k.role), k.public_key);
  if (with_secret) text += fmt::format("secret = {}\n", k.secret_key);
  return text;
}

std::string AllowLine(const CurveKey& k) {
  return fmt::format("{} {} {}\n", KeyRoleName(k.role), k.public_key, k.name);
}

}  // namespace

std::string_view KeyRoleName(KeyRole role) {
  switch (role) {
    case KeyRole::kScheduler:
      return "scheduler";
    case KeyRole::kServer:
      return "server";
    case KeyRole::kWorker:
      return "worker";
    case KeyRole::kOperator:
      return "operator";
  }
  return "?";
}

StatusOr<KeyRole> ParseKeyRole(std::string_view name) {
  for (KeyRole r : {KeyRole::kScheduler, KeyRole::kServer, KeyRole::kWorker, KeyRole::kOperator}) {
    if (name == KeyRoleName(r)) return r;
  }
  return Status::InvalidArgument(
      fmt::format("unknown key role '{}' (scheduler, server, worker, operator)", name));
}

StatusOr<CurveKey> NewCurveKey(std::string name, KeyRole role) {
  if (!ValidKeyName(name)) {
    return Status::InvalidArgument(
        fmt::format("key name '{}': use letters, digits, '-', '_' and '.'", name));
  }
  std::array<char, kZ85KeyChars + 1> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    return Status::FailedPrecondition(
        fmt::format("this libzmq cannot make CURVE keys: {}", zmq_strerror(zmq_errno())));
  }
  return CurveKey{std::move(name), role, pub.data(), sec.data()};
}

StatusOr<CurveKey> ReadCurveKey(const std::string& path, bool with_secret) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot read key file {}", path));
  CurveKey key;
  key.name = std::filesystem::path(path).stem().string();
  std::string role;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = Trimmed(line);  // '#' is a Z85 digit: only whole lines are comments
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      return Status::Malformed(fmt::format("{}:{}: expected 'name = value'", path, n));
    }
    const std::string field = Trimmed(line.substr(0, eq));
    const std::string value = Trimmed(line.substr(eq + 1));
    if (field == "role") {
      role = value;
    } else if (field == "public") {
      key.public_key = value;
    } else if (field == "secret") {
      key.secret_key = value;
    } else {
      return Status::Malformed(fmt::format("{}:{}: unknown field '{}'", path, n, field));
    }
  }
  auto r = ParseKeyRole(role);
  if (!r.ok()) return Status::Malformed(fmt::format("{}: {}", path, r.status().message()));
  key.role = *r;
  if (!IsZ85Key(key.public_key)) {
    return Status::Malformed(fmt::format("{}: 'public' is not a 40-character Z85 key", path));
  }
  if (!with_secret) {
    key.secret_key.clear();
    return key;
  }
  std::array<char, kZ85KeyChars + 1> derived{};
  if (!IsZ85Key(key.secret_key) || zmq_curve_public(derived.data(), key.secret_key.c_str()) != 0) {
    return Status::Malformed(fmt::format("{}: 'secret' is not a 40-character Z85 key", path));
  }
  if (key.public_key != derived.data()) {
    return Status::Malformed(
        fmt::format("{}: the secret key does not belong to the public key", path));
  }
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & 007) != 0) {
    spdlog::warn("{} is readable by every user (mode {:o}): anyone who reads it can act as a {}",
                 path, st.st_mode & 0777, role);
  }
  return key;
}

StatusOr<AllowList::Keys> AllowList::Parse(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot read the allow-list {}", path));
  Keys keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = Trimmed(line);  // '#' is a Z85 digit: only whole lines are comments
    if (line.empty() || line.front() == '#') continue;
    std::istringstream fields(line);
    std::string role, pub, name, extra;
    fields >> role >> pub >> name >> extra;
    auto r = ParseKeyRole(role);
    if (!r.ok()) return Status::Malformed(fmt::format("{}:{}: {}", path, n, r.status().message()));
    if (!IsZ85Key(pub)) {
      return Status::Malformed(
          fmt::format("{}:{}: '{}' is not a 40-character Z85 key", path, n, pub));
    }
    if (!extra.empty()) {
      return Status::Malformed(fmt::format("{}:{}: expected 'ROLE PUBLIC-KEY [NAME]'", path, n));
    }
    if (keys.contains(pub)) {
      return Status::Malformed(fmt::format("{}:{}: key {} is listed twice", path, n, pub));
    }
    keys[pub] = CurveKey{name, *r, pub, ""};
  }
  return keys;
}

StatusOr<AllowList> AllowList::Read(const std::string& path) {
  auto keys = Parse(path);
  if (!keys.ok()) return keys.status();
  AllowList list;
  list.shared_->keys = std::move(*keys);
  list.shared_->path = path;
  return list;
}

StatusOr<std::string> AllowList::Reload() {
  std::string path;
  {
    std::shared_lock lock(shared_->mu);
    path = shared_->path;
  }
  if (path.empty()) return Status::FailedPrecondition("this allow-list was not read from a file");
  auto keys = Parse(path);
  if (!keys.ok()) return keys.status();
  std::unique_lock lock(shared_->mu);
  size_t added = 0, removed = 0;
  for (const auto& [pub, key] : *keys) {
    auto old = shared_->keys.find(pub);
    if (old == shared_->keys.end() || old->second.role != key.role) ++added;
  }
  for (const auto& [pub, key] : shared_->keys) {
    auto now = keys->find(pub);
    if (now == keys->end() || now->second.role != key.role) ++removed;
  }
  shared_->keys = std::move(*keys);
  return fmt::format("{} keys ({} added, {} removed)", shared_->keys.size(), added, removed);
}

std::optional<CurveKey> AllowList::Find(const std::string& public_key) const {
  std::shared_lock lock(shared_->mu);
  auto it = shared_->keys.find(public_key);
  if (it == shared_->keys.end()) return std::nullopt;
  return it->second;
}

std::optional<KeyRole> AllowList::RoleOf(const std::string& public_key) const {
  std::shared_lock lock(shared_->mu);
  auto it = shared_->keys.find(public_key);
  if (it == shared_->keys.end()) return std::nullopt;
  return it->second.role;
}

size_t AllowList::size() const {
  std::shared_lock lock(shared_->mu);
  return shared_->keys.size();
}

void AllowList::Add(CurveKey key) {
  key.secret_key.clear();
  std::unique_lock lock(shared_->mu);
  std::string pub = key.public_key;
  shared_->keys[pub] = std::move(key);
}

Status Auth::SecureClient(zmq::socket_t& socket, const std::string& peer_public) const {
  if (!curve) return Status();
  if (!IsZ85Key(peer_public)) {
    return Status::FailedPrecondition(
        "the peer has no CURVE public key (is it running without --auth=curve?)");
  }
  socket.set(zmq::sockopt::curve_serverkey, peer_public);
  socket.set(zmq::sockopt::curve_publickey, own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, own.secret_key);
  return Status();
}

void Auth::SecureServer(zmq::socket_t& socket, const std::string& domain) const {
  if (!curve) return;
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, own.secret_key);
  socket.set(zmq::sockopt::zap_domain, domain);
}

std::optional<KeyRole> Auth::RoleOf(const std::string& peer) const {
  if (!curve) return std::nullopt;
  return allow.RoleOf(peer);
}

Status ValidateAuthFlags(const AuthFlags& flags) {
  if (flags.mode.empty() || flags.mode == "none") {
    if (!flags.keys_dir.empty()) {
      return Status::InvalidArgument("--keys is given but --auth is none: add --auth=curve");
    }
    return Status();
  }
  if (flags.mode != "curve") {
    return Status::InvalidArgument(fmt::format("--auth={}: expected none or curve", flags.mode));
  }
  if (flags.keys_dir.empty()) {
    return Status::InvalidArgument(
        "--auth=curve needs --keys=DIR (made by `hetps keygen --out=DIR`)");
  }
  return Status();
}

std::string Auth::Describe() const {
  if (!curve) return "no authentication";
  return fmt::format("CURVE as '{}', {} keys admitted", own.name, allow.size());
}

StatusOr<Auth> LoadAuth(const AuthFlags& flags, std::optional<KeyRole> role) {
  Auth auth;
  if (Status s = ValidateAuthFlags(flags); !s.ok()) return s;
  if (flags.mode.empty() || flags.mode == "none") return auth;
  if (!zmq_has("curve")) {
    return Status::FailedPrecondition("this libzmq was built without CURVE (libsodium)");
  }
  auth.curve = true;
  if (flags.key_name.empty() && !role) return Status::InvalidArgument("no key named: pass --key");
  const std::string name =
      flags.key_name.empty() ? std::string(KeyRoleName(*role)) : flags.key_name;
  const std::filesystem::path dir(flags.keys_dir);
  auto own = ReadCurveKey((dir / (name + ".key")).string(), /*with_secret=*/true);
  if (!own.ok()) return own.status();
  if (role && own->role != *role) {
    return Status::InvalidArgument(fmt::format("key '{}' is a {} key; this process is a {}", name,
                                               KeyRoleName(own->role), KeyRoleName(*role)));
  }
  auth.own = std::move(*own);
  if (role != KeyRole::kScheduler) {  // an operator's command too
    auto sched = ReadCurveKey((dir / "scheduler.pub").string(), /*with_secret=*/false);
    if (!sched.ok()) return sched.status();
    if (sched->role != KeyRole::kScheduler) {
      return Status::InvalidArgument(
          fmt::format("{}/scheduler.pub is not a scheduler key", flags.keys_dir));
    }
    auth.scheduler_public = sched->public_key;
  }
  if (role == KeyRole::kScheduler || role == KeyRole::kServer) {  // they listen
    auto allow = AllowList::Read((dir / "allow").string());
    if (!allow.ok()) return allow.status();
    auth.allow = std::move(*allow);
  }
  return auth;
}

Status CheckListenEndpoint(const std::string& endpoint, const Auth& auth, bool insecure) {
  if (auth.curve || insecure) return Status();
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) return Status();
  std::string host = endpoint;
  if (auto scheme = host.find("://"); scheme != std::string::npos) host = host.substr(scheme + 3);
  if (auto colon = host.rfind(':'); colon != std::string::npos) host = host.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.starts_with("127.") || host == "localhost" || host == "::1" || host == "lo") {
    return Status();
  }
  return Status::InvalidArgument(fmt::format(
      "refusing to listen on {} without authentication: anyone who can reach it could join the "
      "cluster, write the model and read it. Run every process with --auth=curve --keys=DIR "
      "(hetps keygen --out DIR), or pass --insecure to accept that",
      endpoint));
}

StatusOr<std::vector<std::string>> WriteKeys(const std::string& dir,
                                             const std::vector<CurveKey>& add) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  const fs::path allow_path = root / "allow";
  std::vector<CurveKey> keys;
  std::error_code ec;
  const bool fresh = !fs::exists(allow_path, ec);
  if (fresh) {
    fs::create_directories(root, ec);
    if (ec) return Status::InvalidArgument(fmt::format("cannot create {}: {}", dir, ec.message()));
    fs::permissions(root, fs::perms::owner_all, ec);
    for (KeyRole r :
         {KeyRole::kScheduler, KeyRole::kServer, KeyRole::kWorker, KeyRole::kOperator}) {
      auto k = NewCurveKey(std::string(KeyRoleName(r)), r);
      if (!k.ok()) return k.status();
      keys.push_back(std::move(*k));
    }
  }
  for (const CurveKey& a : add) {
    auto k = NewCurveKey(a.name, a.role);
    if (!k.ok()) return k.status();
    keys.push_back(std::move(*k));
  }
  for (const CurveKey& k : keys) {  // refuse before writing anything
    for (const char* ext : {".key", ".pub"}) {
      if (fs::exists(root / (k.name + ext), ec)) {
        return Status::InvalidArgument(fmt::format("{} exists: a key pair is never overwritten",
                                                   (root / (k.name + ext)).string()));
      }
    }
  }
  std::vector<std::string> written;
  std::string allow = fresh ? "# hetps allow-list: ROLE PUBLIC-KEY NAME. The scheduler and the "
                              "servers admit only these keys, each in its role.\n"
                            : "";
  for (const CurveKey& k : keys) {
    const std::string key_path = (root / (k.name + ".key")).string();
    const std::string pub_path = (root / (k.name + ".pub")).string();
    if (Status s = WriteNewFile(key_path, KeyFileText(k, true), 0600); !s.ok()) return s;
    if (Status s = WriteNewFile(pub_path, KeyFileText(k, false), 0644); !s.ok()) return s;
    written.push_back(key_path);
    written.push_back(pub_path);
    allow += AllowLine(k);
  }
  std::ofstream out(allow_path, std::ios::app);
  out << allow;
  if (!out.flush()) return Status::Internal(fmt::format("cannot write {}", allow_path.string()));
  written.push_back(allow_path.string());
  return written;
}

ZapHandler::ZapHandler(zmq::context_t& context, const AllowList& allow,
                       std::map<std::string, std::set<KeyRole>> domains)
    : socket_(context, zmq::socket_type::rep), allow_(allow), domains_(std::move(domains)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind(kZapEndpoint);
  thread_ = std::thread([this] { Run(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  thread_.join();
}

void ZapHandler::Run() {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  while (!stop_.load()) {
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(socket_, std::back_inserter(request))) continue;
      // version, request id, domain, address, identity, mechanism, credentials...
      std::vector<zmq::message_t> reply;
      reply.emplace_back(std::string_view("1.0"));
      reply.emplace_back(request.size() > 1 ? request[1].to_string_view() : std::string_view());
      std::pair<std::string, std::string> decision{"500", ""};
      if (request.size() >= 6 && request[0].to_string_view() == "1.0") {
        decision = Decide(request[2].to_string(), request[3].to_string(), request[5].to_string(),
                          request.size() > 6 ? request[6].to_string() : "");
      }
      reply.emplace_back(decision.first);
      reply.emplace_back(std::string_view(decision.first == "200" ? "OK" : "refused"));
      reply.emplace_back(decision.second);
      reply.emplace_back();  // no metadata
      zmq::send_multipart(socket_, reply);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      spdlog::error("authentication handler: {}", e.what());
    }
  }
}

std::pair<std::string, std::string> ZapHandler::Decide(const std::string& domain,
                                                       const std::string& address,
                                                       const std::string& mechanism,
                                                       const std::string& credential) {
  std::string why;
  std::string key;
  if (mechanism != "CURVE" || credential.size() != 32) {
    why = fmt::format("mechanism {} without a CURVE key", mechanism);
  } else {
    std::array<char, kZ85KeyChars + 1> z85{};
    zmq_z85_encode(z85.data(), reinterpret_cast<const uint8_t*>(credential.data()), 32);
    key = z85.data();
    const std::optional<CurveKey> k = allow_.Find(key);
    auto d = domains_.find(domain);
    if (!k) {
      why = fmt::format("key {} is not in the allow-list", key);
    } else if (d == domains_.end() || !d->second.contains(k->role)) {
      why = fmt::format("key {} ('{}', role {}) may not connect to the {}", key, k->name,
                        KeyRoleName(k->role), domain);
    }
  }
  if (why.empty()) {
    admitted_.fetch_add(1);
    return {"200", key};
  }
  const uint64_t n = refused_.fetch_add(1) + 1;
  if (n <= 20 || n % 1000 == 0) {
    spdlog::warn("refused a connection from {}: {} ({} refused so far)", address, why, n);
  }
  return {"400", ""};
}

}  // namespace hetps
