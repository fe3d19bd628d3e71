// A sparse table's operator side (docs/tables.md) against a real cluster. `hetps ctl export`: a
// full export holds every row with its value; deltas hold the rows pushed since and tombstones
// for the keys evicted since, so that a copy built from a full export and its deltas equals a
// full export taken at the same moment; misuse is refused with a reason and the cluster goes
// on.
#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include "tests/integration/local_cluster.h"
#include "tests/scratch_dir.h"

namespace hetps::testing {
namespace {

constexpr int64_t kDim = 4;
using Rows = std::map<uint64_t, std::vector<float>>;

struct Export {
  proto::TableExport manifest;
  int64_t rows = 0, tombstones = 0;
};

// Applies the export in `dir` to `copy` (bucket by bucket, as docs/tables.md says a serving
// copy does: a full file replaces its bucket; a delta drops its tombstones, then upserts).
Export Apply(const std::string& dir, std::map<int32_t, Rows>& copy) {
  Export e;
  std::ifstream in(dir + "/MANIFEST.json");
  std::stringstream json;
  json << in.rdbuf();
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json.str(), &e.manifest).ok())
      << dir << ": " << json.str();
  for (const proto::BucketExport& f : e.manifest.files()) {
    std::ifstream file(dir + "/" + f.file(), std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(file)), {});
    EXPECT_EQ(static_cast<int64_t>(data.size()), f.bytes()) << f.file();
    EXPECT_EQ(data.compare(0, 8, "HETPSEXP"), 0);
    uint32_t fields[6];
    uint64_t tombstones = 0, rows = 0;
    std::memcpy(fields, data.data() + 8, sizeof(fields));
    std::memcpy(&tombstones, data.data() + 32, 8);
    std::memcpy(&rows, data.data() + 40, 8);
    EXPECT_EQ(fields[1], kDim);
    EXPECT_EQ(static_cast<int32_t>(fields[2]), f.bucket());
    EXPECT_EQ(fields[4] != 0, f.full());
    EXPECT_EQ(static_cast<int64_t>(rows), f.rows());
    Rows& bucket = copy[f.bucket()];
    if (f.full()) bucket.clear();
    const char* p = data.data() + 48;
    for (uint64_t i = 0; i < tombstones; ++i, p += 8) {
      uint64_t key;
      std::memcpy(&key, p, 8);
      bucket.erase(key);
    }
    for (uint64_t i = 0; i < rows; ++i) {
      uint64_t key;
      std::memcpy(&key, p, 8);
      std::vector<float> row(kDim);
      std::memcpy(row.data(), p + 8, kDim * sizeof(float));
      bucket[key] = row;
      p += 8 + kDim * sizeof(float);
    }
    e.rows += static_cast<int64_t>(rows);
    e.tombstones += static_cast<int64_t>(tombstones);
  }
  return e;
}

// `hetps ctl ARGS`: its exit status and what it printed.
std::pair<int, std::string> Ctl(const LocalCluster& cluster, const std::string& args) {
  Ran r = Shell(fmt::format("{} ctl --scheduler={} {}", Bin("hetps"), cluster.endpoint(), args));
  return {r.code, r.output};
}

void PushKeys(Client& c, uint64_t first, uint64_t count, float value) {
  std::vector<uint64_t> keys(count);
  std::iota(keys.begin(), keys.end(), first);
  std::vector<float> grads(count * kDim, -value);  // sgd lr 1 from zeros: rows hold `value`
  ASSERT_TRUE(
      c.PushRows("emb", keys.data(), static_cast<int64_t>(count), grads.data()).Wait().ok());
}

TEST(TableExportTest, DeltasAndTombstonesRebuildWhatAFullExportHolds) {
  ScratchDir out("hetps-export");
  LocalCluster cluster({.servers = 2, .workers = 1, .server_flags = {"--optimizer=sgd:lr=1"}});
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  // 64 rows per server with lru: 16 per bucket (8 buckets over 2 servers).
  ASSERT_TRUE(
      c.DeclareTable("emb", {.dim = kDim, .max_rows = 64, .eviction = "lru", .init = "zeros"})
          .ok());
  ASSERT_TRUE(c.DeclareTensors({{"dense", {4}, 0}}).ok());
  PushKeys(c, 0, 40, 1.0f);  // at most 16 in any bucket: nothing evicted
  const std::string first = out.str() + "/1";
  auto [status, said] = Ctl(cluster, "export --table=emb --out=" + first);
  ASSERT_EQ(status, 0) << said;
  EXPECT_NE(said.find("40 rows, 0 tombstones in 8 bucket files"), std::string::npos) << said;
  std::map<int32_t, Rows> copy;
  Export e1 = Apply(first, copy);
  EXPECT_EQ(e1.manifest.buckets(), 8);
  EXPECT_EQ(e1.rows, 40);
  for (const auto& [bucket, rows] : copy) {
    for (const auto& [key, row] : rows) {
      EXPECT_LT(key, 40u);
      EXPECT_EQ(row, std::vector<float>(kDim, 1.0f)) << key;
      EXPECT_EQ(TableBucketOf(key, 8), bucket);
    }
  }
  // 400 new keys overflow every bucket (lru drops the oldest), then 10 of the first again.
  PushKeys(c, 1000, 400, 2.0f);
  PushKeys(c, 0, 10, 3.0f);
  const std::string second = out.str() + "/2", third = out.str() + "/3";
  ASSERT_EQ(Ctl(cluster, "export --table=emb --out=" + second).first, 0);
  Export e2 = Apply(second, copy);
  EXPECT_GT(e2.tombstones, 0) << "keys were evicted since the first export";
  EXPECT_LE(e2.rows, 128);
  // A full export at the same moment holds exactly the copy built from the deltas, and the
  // rows each bucket can hold: min(16, the distinct keys that reached it).
  ASSERT_EQ(Ctl(cluster, "export --full --table=emb --out=" + third).first, 0);
  std::map<int32_t, Rows> full;
  Export e3 = Apply(third, full);
  EXPECT_EQ(e3.tombstones, 0);
  for (const proto::BucketExport& f : e3.manifest.files()) EXPECT_TRUE(f.full());
  EXPECT_EQ(copy, full);
  std::map<int32_t, int64_t> reached;
  for (uint64_t k = 0; k < 40; ++k) ++reached[TableBucketOf(k, 8)];
  for (uint64_t k = 1000; k < 1400; ++k) ++reached[TableBucketOf(k, 8)];
  int64_t want = 0;
  for (const auto& [bucket, n] : reached) want += std::min<int64_t>(n, 16);
  EXPECT_EQ(e3.rows, want);
  // Every exported value is the server's: a pull of the exported keys reads the same rows.
  for (const auto& [bucket, rows] : full) {
    for (const auto& [key, row] : rows) {
      std::vector<float> pulled(kDim);
      ASSERT_TRUE(c.PullRows("emb", &key, 1, pulled.data()).Wait().ok());
      ASSERT_EQ(pulled, row) << key;
    }
  }
  // Nothing pushed since: an empty delta.
  const std::string fourth = out.str() + "/4";
  ASSERT_EQ(Ctl(cluster, "export --table=emb --out=" + fourth).first, 0);
  std::map<int32_t, Rows> unused;
  Export e4 = Apply(fourth, unused);
  EXPECT_EQ(e4.rows + e4.tombstones, 0);
}

TEST(TableExportTest, MisuseIsRefusedWithItsReasonAndTheClusterGoesOn) {
  ScratchDir out("hetps-export");
  LocalCluster cluster({.servers = 1, .workers = 1, .server_flags = {"--optimizer=sgd:lr=1"}});
  auto clients = cluster.ConnectClients(1);
  Client& c = *clients[0];
  ASSERT_TRUE(c.DeclareTable("emb", {.dim = kDim, .init = "zeros"}).ok());
  ASSERT_TRUE(c.DeclareTensors({{"dense", {4}, 0}}).ok());
  PushKeys(c, 0, 10, 1.0f);
  auto [status, said] = Ctl(cluster, "export --table=dense --out=" + out.str() + "/a");
  EXPECT_NE(status, 0);
  EXPECT_NE(said.find("no sparse table 'dense' (tables: emb)"), std::string::npos) << said;
  std::tie(status, said) = Ctl(cluster, "export --table=emb");
  EXPECT_NE(status, 0);
  EXPECT_NE(said.find("--out=DIR"), std::string::npos) << said;
  ASSERT_EQ(Ctl(cluster, "export --table=emb --out=" + out.str() + "/b").first, 0);
  std::tie(status, said) = Ctl(cluster, "export --table=emb --out=" + out.str() + "/b");
  EXPECT_NE(status, 0);
  EXPECT_NE(said.find("holds an export already"), std::string::npos) << said;
  // The cluster goes on: a push and a pull, and the next export holds the new row only.
  PushKeys(c, 100, 1, 5.0f);
  ASSERT_EQ(Ctl(cluster, "export --table=emb --out=" + out.str() + "/c").first, 0);
  std::map<int32_t, Rows> copy;
  EXPECT_EQ(Apply(out.str() + "/c", copy).rows, 1);
}

}  // namespace
}  // namespace hetps::testing
