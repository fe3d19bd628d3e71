#include "common/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/message.h"
#include "tests/scratch_dir.h"

namespace hetps {
namespace {

using testing::ScratchDir;

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(KeygenTest, WritesAPairPerRoleAndAnAllowListOfTheRolesThatConnect) {
  ScratchDir dir("hetps-keys");
  auto written = WriteKeys(dir.str(), {});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(written->size(), 9u);  // 4 x (.key, .pub) + allow
  for (const char* role : {"scheduler", "server", "worker", "operator"}) {
    auto key = ReadCurveKey((dir.path() / (std::string(role) + ".key")).string(), true);
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    EXPECT_EQ(KeyRoleName(key->role), role);
    auto pub = ReadCurveKey((dir.path() / (std::string(role) + ".pub")).string(), false);
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    EXPECT_EQ(pub->public_key, key->public_key);
    EXPECT_TRUE(pub->secret_key.empty());
    EXPECT_EQ(Read(dir.path() / (std::string(role) + ".pub")).find(key->secret_key),
              std::string::npos);
    struct stat st {};
    ASSERT_EQ(stat((dir.path() / (std::string(role) + ".key")).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << role;
  }
  auto allow = AllowList::Read((dir.path() / "allow").string());
  ASSERT_TRUE(allow.ok()) << allow.status().ToString();
  EXPECT_EQ(allow->size(), 4u);
  auto worker = ReadCurveKey((dir.path() / "worker.key").string(), true);
  ASSERT_TRUE(allow->Find(worker->public_key).has_value());
  EXPECT_EQ(allow->Find(worker->public_key)->role, KeyRole::kWorker);
  auto scheduler = ReadCurveKey((dir.path() / "scheduler.key").string(), true);
  ASSERT_TRUE(allow->Find(scheduler->public_key).has_value());
  EXPECT_EQ(allow->Find(scheduler->public_key)->role, KeyRole::kScheduler);
}

TEST(KeygenTest, AddsPerNodePairsAndNeverOverwritesOne) {
  ScratchDir dir("hetps-keys");
  ASSERT_TRUE(WriteKeys(dir.str(), {}).ok());
  const std::string worker_before = Read(dir.path() / "worker.key");
  auto added = WriteKeys(dir.str(), {CurveKey{"edge-7", KeyRole::kWorker, "", ""}});
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_EQ(added->size(), 3u);
  auto allow = AllowList::Read((dir.path() / "allow").string());
  ASSERT_TRUE(allow.ok());
  EXPECT_EQ(allow->size(), 5u);
  auto edge = ReadCurveKey((dir.path() / "edge-7.key").string(), true);
  ASSERT_TRUE(edge.ok());
  ASSERT_TRUE(allow->Find(edge->public_key).has_value());
  EXPECT_EQ(allow->Find(edge->public_key)->name, "edge-7");

  auto again = WriteKeys(dir.str(), {CurveKey{"edge-7", KeyRole::kWorker, "", ""}});
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("never overwritten"), std::string::npos);
  auto role_name = WriteKeys(dir.str(), {CurveKey{"worker", KeyRole::kWorker, "", ""}});
  EXPECT_FALSE(role_name.ok());
  EXPECT_EQ(Read(dir.path() / "worker.key"), worker_before);
  EXPECT_EQ(AllowList::Read((dir.path() / "allow").string())->size(), 5u);
  EXPECT_FALSE(WriteKeys(dir.str(), {CurveKey{"../escape", KeyRole::kWorker, "", ""}}).ok());
}

TEST(KeyFileTest, RefusesATamperedOrMalformedFile) {
  ScratchDir dir("hetps-keys");
  std::filesystem::create_directories(dir.path());
  auto a = NewCurveKey("a", KeyRole::kWorker);
  auto b = NewCurveKey("b", KeyRole::kWorker);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto path = dir.path() / "a.key";
  // A secret that is not the public key's.
  Write(path, "role = worker\npublic = " + a->public_key + "\nsecret = " + b->secret_key + "\n");
  EXPECT_FALSE(ReadCurveKey(path.string(), true).ok());
  Write(path, "role = admin\npublic = " + a->public_key + "\nsecret = " + a->secret_key + "\n");
  EXPECT_FALSE(ReadCurveKey(path.string(), true).ok());
  Write(path, "role = worker\npublic = short\nsecret = " + a->secret_key + "\n");
  EXPECT_FALSE(ReadCurveKey(path.string(), true).ok());
  Write(path, "role = worker\npublic = " + a->public_key + "\n");  // no secret
  EXPECT_FALSE(ReadCurveKey(path.string(), true).ok());
  EXPECT_TRUE(ReadCurveKey(path.string(), false).ok());
  EXPECT_EQ(ReadCurveKey((dir.path() / "missing.key").string(), true).status().code(),
            StatusCode::kNotFound);

  const auto allow = dir.path() / "allow";
  Write(allow, "worker " + a->public_key + " a\nworker " + a->public_key + " again\n");
  EXPECT_FALSE(AllowList::Read(allow.string()).ok());  // listed twice
  Write(allow, "root " + a->public_key + " a\n");
  EXPECT_FALSE(AllowList::Read(allow.string()).ok());
  Write(allow, "worker " + a->public_key + " a extra\n");
  EXPECT_FALSE(AllowList::Read(allow.string()).ok());
}

// Reload: the file read again becomes the list every copy sees, while other threads look keys
// up; a bad file changes nothing.
TEST(KeyFileTest, AReloadedAllowListIsSeenByEveryCopyAndABadFileChangesNothing) {
  ScratchDir dir("hetps-keys");
  std::filesystem::create_directories(dir.path());
  auto a = NewCurveKey("a", KeyRole::kWorker);
  auto b = NewCurveKey("b", KeyRole::kOperator);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto path = dir.path() / "allow";
  Write(path, "worker " + a->public_key + " a\n");
  auto list = AllowList::Read(path.string());
  ASSERT_TRUE(list.ok());
  const AllowList copy = *list;  // e.g. the ZAP handler's, the scheduler's
  std::atomic<bool> done{false};
  std::thread reader([&] {  // lookups while the list is reloaded
    while (!done.load()) (void)copy.Find(a->public_key);
  });
  EXPECT_FALSE(copy.Find(b->public_key).has_value());
  Write(path, "operator " + b->public_key + " b\n");
  auto changed = list->Reload();
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(*changed, "1 keys (1 added, 1 removed)");
  EXPECT_EQ(copy.Find(b->public_key)->role, KeyRole::kOperator);
  EXPECT_FALSE(copy.Find(a->public_key).has_value()) << "a removed key is refused";
  Write(path, "worker " + a->public_key + " a\nroot " + a->public_key + " x\n");
  EXPECT_FALSE(list->Reload().ok());
  EXPECT_TRUE(copy.Find(b->public_key).has_value()) << "a bad file changes nothing";
  EXPECT_EQ(copy.size(), 1u);
  std::filesystem::remove(path);
  EXPECT_EQ(list->Reload().status().code(), StatusCode::kNotFound);
  EXPECT_EQ(copy.size(), 1u);
  done = true;
  reader.join();
  EXPECT_FALSE(AllowList().Reload().ok()) << "a list not read from a file";
}

// '#' is a Z85 digit: a key that holds one must survive both files.
TEST(KeyFileTest, AKeyWithAHashInItReadsBack) {
  ScratchDir dir("hetps-keys");
  std::filesystem::create_directories(dir.path());
  StatusOr<CurveKey> key = Status::Internal("none drawn");
  for (int i = 0; i < 1000; ++i) {
    key = NewCurveKey("h", KeyRole::kWorker);
    ASSERT_TRUE(key.ok());
    if (key->public_key.find('#') != std::string::npos &&
        key->secret_key.find('#') != std::string::npos) {
      break;
    }
  }
  ASSERT_NE(key->public_key.find('#'), std::string::npos);
  Write(dir.path() / "h.key", "# a comment\nrole = worker\npublic = " + key->public_key +
                                  "\nsecret = " + key->secret_key + "\n");
  auto read = ReadCurveKey((dir.path() / "h.key").string(), true);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_key, key->public_key);
  Write(dir.path() / "allow", "# comment\nworker " + key->public_key + " h\n");
  auto allow = AllowList::Read((dir.path() / "allow").string());
  ASSERT_TRUE(allow.ok()) << allow.status().ToString();
  EXPECT_TRUE(allow->Find(key->public_key).has_value());
}

TEST(LoadAuthTest, LoadsWhatEachRoleNeedsAndRefusesMismatches) {
  ScratchDir dir("hetps-keys");
  ASSERT_TRUE(WriteKeys(dir.str(), {}).ok());
  auto none = LoadAuth(AuthFlags{}, KeyRole::kWorker);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->curve);
  EXPECT_FALSE(LoadAuth(AuthFlags{"none", dir.str(), ""}, KeyRole::kWorker).ok());
  EXPECT_FALSE(LoadAuth(AuthFlags{"curve", "", ""}, KeyRole::kWorker).ok());
  EXPECT_FALSE(LoadAuth(AuthFlags{"tls", dir.str(), ""}, KeyRole::kWorker).ok());

  auto worker = LoadAuth(AuthFlags{"curve", dir.str(), ""}, KeyRole::kWorker);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  EXPECT_TRUE(worker->curve);
  EXPECT_EQ(worker->own.role, KeyRole::kWorker);
  EXPECT_EQ(worker->scheduler_public,
            ReadCurveKey((dir.path() / "scheduler.pub").string(), false)->public_key);
  EXPECT_EQ(worker->allow.size(), 0u);  // workers do not listen

  auto server = LoadAuth(AuthFlags{"curve", dir.str(), ""}, KeyRole::kServer);
  ASSERT_TRUE(server.ok());
  EXPECT_EQ(server->allow.size(), 4u);
  // A worker process with the server's key is refused; an operator's command takes any key.
  auto wrong = LoadAuth(AuthFlags{"curve", dir.str(), "server"}, KeyRole::kWorker);
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("server key"), std::string::npos);
  EXPECT_TRUE(LoadAuth(AuthFlags{"curve", dir.str(), "worker"}, std::nullopt).ok());
  EXPECT_FALSE(LoadAuth(AuthFlags{"curve", dir.str(), "nobody"}, KeyRole::kWorker).ok());
}

TEST(ListenCheckTest, OffLoopbackNeedsKeysOrInsecure) {
  Auth none;
  for (const char* ok : {"tcp://127.0.0.1:*", "tcp://127.0.0.2:7000", "tcp://localhost:1",
                         "tcp://[::1]:5", "tcp://lo:7", "ipc:///tmp/x", "inproc://y"}) {
    EXPECT_TRUE(CheckListenEndpoint(ok, none, false).ok()) << ok;
  }
  for (const char* open : {"tcp://0.0.0.0:7000", "tcp://*:*", "tcp://10.0.0.1:7000",
                           "tcp://eth0:7000", "tcp://[::]:7", "tcp://example.com:7"}) {
    Status s = CheckListenEndpoint(open, none, false);
    EXPECT_FALSE(s.ok()) << open;
    EXPECT_NE(s.message().find("--insecure"), std::string::npos);
    EXPECT_TRUE(CheckListenEndpoint(open, none, true).ok()) << open;
  }
  Auth curve;
  curve.curve = true;
  EXPECT_TRUE(CheckListenEndpoint("tcp://0.0.0.0:7000", curve, false).ok());
}

// A CURVE ROUTER guarded by a ZapHandler, and DEALERs dialing it with several keys.
class ZapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteKeys(dir_.str(), {}).ok());
    auto auth = LoadAuth(AuthFlags{"curve", dir_.str(), ""}, KeyRole::kServer);
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    server_ = std::move(*auth);
    zap_.emplace(ctx_, server_.allow,
                 std::map<std::string, std::set<KeyRole>>{{"server", {KeyRole::kWorker}}});
    server_.SecureServer(router_, "server");
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = BoundEndpoint(router_);
  }
  // Sends one message from a DEALER with `key` (none: a plain socket) expecting the server's
  // `server_public`; returns the envelope the router got within 1.5 s.
  std::optional<Envelope> SendWith(const CurveKey* key, const std::string& server_public) {
    zmq::context_t ctx(1);
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    if (key != nullptr) {
      Auth a;
      a.curve = true;
      a.own = *key;
      EXPECT_TRUE(a.SecureClient(dealer, server_public).ok());
    }
    dealer.connect(endpoint_);
    proto::Header h;
    h.set_type(proto::PULL);
    (void)Send(dealer, h, {}, /*dontwait=*/true);
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(1500));
    if (!(item.revents & ZMQ_POLLIN)) return std::nullopt;
    return Receive(router_, zmq::recv_flags::dontwait, /*routed=*/true);
  }
  CurveKey Key(const std::string& name) {
    return *ReadCurveKey((dir_.path() / (name + ".key")).string(), true);
  }

  ScratchDir dir_{"hetps-keys"};
  Auth server_;
  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  std::optional<ZapHandler> zap_;
  std::string endpoint_;
};

TEST_F(ZapTest, AListedWorkerKeyIsAdmittedAndItsMessagesCarryTheKey) {
  const CurveKey worker = Key("worker");
  auto env = SendWith(&worker, server_.own.public_key);
  ASSERT_TRUE(env.has_value());
  EXPECT_TRUE(env->status.ok());
  EXPECT_EQ(env->peer, worker.public_key);
  EXPECT_EQ(server_.RoleOf(env->peer), KeyRole::kWorker);
  EXPECT_EQ(zap_->admitted(), 1u);
  EXPECT_EQ(zap_->refused(), 0u);
}

TEST_F(ZapTest, UnknownKeysOtherRolesAndPlainPeersNeverReachTheSocket) {
  auto stranger = NewCurveKey("stranger", KeyRole::kWorker);
  ASSERT_TRUE(stranger.ok());
  EXPECT_FALSE(SendWith(&*stranger, server_.own.public_key).has_value());
  EXPECT_EQ(zap_->refused(), 1u);
  const CurveKey op = Key("operator");  // listed, but servers take only workers
  EXPECT_FALSE(SendWith(&op, server_.own.public_key).has_value());
  EXPECT_EQ(zap_->refused(), 2u);
  EXPECT_FALSE(SendWith(nullptr, "").has_value());  // no CURVE at all: no handshake
  // A worker expecting another server key cannot complete the handshake either.
  const CurveKey worker = Key("worker");
  EXPECT_FALSE(SendWith(&worker, Key("scheduler").public_key).has_value());
  EXPECT_EQ(zap_->admitted(), 0u);
  // ... and the router still serves the real worker afterwards.
  auto env = SendWith(&worker, server_.own.public_key);
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->peer, worker.public_key);
}

}  // namespace
}  // namespace hetps
