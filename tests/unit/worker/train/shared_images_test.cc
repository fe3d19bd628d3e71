#include "worker/train/shared_images.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "tests/scratch_dir.h"

namespace hetps {
namespace {

std::vector<uint8_t> Idx(std::vector<int32_t> dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (int32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

class SharedImagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.path());
    std::vector<uint8_t> pixels(5 * 2 * 3);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 % 256);
    images_ = Path("images.gz");
    labels_ = Path("labels.gz");
    WriteGz(images_, Idx({5, 2, 3}, pixels));
    WriteGz(labels_, Idx({5}, {3, 1, 4, 1, 5}));
  }
  std::string Path(const std::string& name) const { return (dir_.path() / name).string(); }
  testing::ScratchDir dir_{"shared-images"};
  std::string images_, labels_;
};

TEST_F(SharedImagesTest, GatheredSamplesEqualTheWholeSetLoadedInMemory) {
  auto whole = LoadIdxPair(images_, labels_);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto shared = SharedImages::Open(images_, labels_, Path("cache"));
  ASSERT_TRUE(shared.ok()) << shared.status().ToString();
  EXPECT_EQ(shared->size(), 5);
  EXPECT_EQ(shared->features(), 6);
  EXPECT_EQ(shared->labels(), (std::vector<int32_t>{3, 1, 4, 1, 5}));
  const Dataset d = shared->Gather({3, 0, 4});
  ASSERT_EQ(d.size, 3);
  for (int i = 0; i < 3; ++i) {
    const int64_t s = std::vector<int64_t>{3, 0, 4}[i];
    EXPECT_EQ(d.y[i], whole->y[s]);
    for (int f = 0; f < 6; ++f) EXPECT_EQ(d.x[i * 6 + f], whole->x[s * 6 + f]) << i << " " << f;
  }
}

TEST_F(SharedImagesTest, SecondOpenMapsTheSameCacheFileAndADamagedOneIsRebuilt) {
  auto first = SharedImages::Open(images_, labels_, Path("cache"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const auto bytes = std::filesystem::file_size(first->path());
  auto second = SharedImages::Open(images_, labels_, Path("cache"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->path(), first->path());
  std::filesystem::resize_file(first->path(), bytes - 7);  // truncated
  auto third = SharedImages::Open(images_, labels_, Path("cache"));
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(std::filesystem::file_size(third->path()), bytes);
  EXPECT_EQ(third->Gather({2}).x, first->Gather({2}).x);
}

TEST_F(SharedImagesTest, MissingOrMalformedSourcesAreRefusedWithTheirName) {
  auto missing = SharedImages::Open(Path("nope.gz"), labels_, Path("cache"));
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.gz"), std::string::npos);
  WriteGz(labels_, Idx({5}, {3, 1, 4, 1, 12}));  // a label past 10 classes
  auto bad = SharedImages::Open(images_, labels_, Path("cache"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("labels.gz"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace hetps
