// The co-located transports' registry: the order they are tried in, and the words
// ClientOptions::transport takes (an unknown one is refused naming the choices).
#include "worker/transport.h"

#include <gtest/gtest.h>

namespace hetps {
namespace {

std::vector<std::string> Names(const std::vector<const TransportInfo*>& list) {
  std::vector<std::string> names;
  for (const TransportInfo* t : list) names.push_back(t->name);
  return names;
}

TEST(TransportTest, AutoTriesSharedMemoryThenCrossMemoryAttach) {
  ASSERT_EQ(Transports().size(), 2u);
  for (const TransportInfo& t : Transports()) {
    EXPECT_FALSE(t.summary.empty()) << t.name;
    EXPECT_TRUE(t.open) << t.name;
  }
  auto all = TransportsFor("auto");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Names(*all), (std::vector<std::string>{"shm", "cma"}));
  EXPECT_EQ(ClientOptions{}.transport, "auto");
}

TEST(TransportTest, OneByNameNoneForTheSocketAndUnknownWordsRefused) {
  for (const char* name : {"cma", "shm"}) {
    auto one = TransportsFor(name);
    ASSERT_TRUE(one.ok()) << name;
    EXPECT_EQ(Names(*one), std::vector<std::string>{name});
  }
  auto none = TransportsFor("socket");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  for (const char* bad : {"", "tcp", "SHM", "cma,shm"}) {
    auto refused = TransportsFor(bad);
    ASSERT_FALSE(refused.ok()) << "'" << bad << "'";
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("auto, socket, shm, cma"), std::string::npos)
        << refused.status().message();
  }
}

TEST(TransportTest, ConnectRefusesAnUnknownTransportBeforeJoining) {
  ClientOptions o;
  o.scheduler = "tcp://127.0.0.1:1";  // never reached: the word is checked first
  o.transport = "rdma";
  auto client = Client::Connect(o);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("rdma"), std::string::npos);
}

}  // namespace
}  // namespace hetps
