#include "worker/train/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <fstream>

namespace hetps {
namespace {

std::vector<uint8_t> Idx(std::vector<int32_t> dims, const std::vector<uint8_t>& data,
                         uint8_t type = 0x08) {
  std::vector<uint8_t> b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (int32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string Write(const std::string& name, const std::vector<uint8_t>& bytes, bool gz) {
  const std::string path = ::testing::TempDir() + "/" + name;
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  return path;
}

TEST(IdxTest, ReadsPlainAndGzipFiles) {
  for (bool gz : {false, true}) {
    auto a = ReadIdx(Write(gz ? "a.gz" : "a", Idx({2, 3}, {1, 2, 3, 4, 5, 6}), gz));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->dims, (std::vector<int32_t>{2, 3}));
    EXPECT_EQ(a->data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  }
}

TEST(IdxTest, RefusesCorruptFilesWithAClearMessage) {
  EXPECT_EQ(ReadIdx("/nonexistent/x.gz").status().code(), StatusCode::kNotFound);
  auto bad_magic = ReadIdx(Write("m", {1, 2, 8, 1, 0, 0, 0, 1, 7}, false));
  EXPECT_EQ(bad_magic.status().code(), StatusCode::kMalformed);
  EXPECT_NE(bad_magic.status().message().find("magic"), std::string::npos);
  auto floats = ReadIdx(Write("f", Idx({1}, {0, 0, 0, 0}, 0x0D), false));
  EXPECT_NE(floats.status().message().find("unsigned byte"), std::string::npos);
  auto truncated = ReadIdx(Write("t.gz", Idx({4, 4}, std::vector<uint8_t>(10)), true));
  EXPECT_EQ(truncated.status().code(), StatusCode::kMalformed);
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  auto header = ReadIdx(Write("h", {0, 0, 8, 3, 0, 0}, false));
  EXPECT_NE(header.status().message().find("truncated header"), std::string::npos);
}

TEST(IdxTest, PairsImagesWithLabelsAndStandardizes) {
  const std::string images = Write("i", Idx({2, 1, 2}, {0, 100, 200, 50}), false);
  auto d = LoadIdxPair(images, Write("l", Idx({2}, {3, 9}), false));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->size, 2);
  EXPECT_EQ(d->features, 2);
  EXPECT_EQ(d->y, (std::vector<int32_t>{3, 9}));
  double mean = 0, sq = 0;
  for (float v : d->x) mean += v;
  mean /= 4;
  for (float v : d->x) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0, 1e-6);
  EXPECT_NEAR(std::sqrt(sq / 4), 1, 1e-5);
  EXPECT_EQ(LoadIdxPair(images, Write("l3", Idx({3}, {1, 2, 3}), false)).status().code(),
            StatusCode::kMalformed);
  EXPECT_EQ(LoadIdxPair(images, Write("l10", Idx({2}, {1, 10}), false)).status().code(),
            StatusCode::kMalformed);
}

TEST(IdxTest, LoadsTheRealFashionMnistTestSet) {
  // Installed by deploy/install_deps.sh (Debian package dataset-fashion-mnist).
  auto d = LoadIdxPair(FashionMnistImages(kFashionMnistDir, "t10k"),
                       FashionMnistLabels(kFashionMnistDir, "t10k"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->size, 10000);
  EXPECT_EQ(d->features, 784);
  std::vector<int> count(10, 0);
  for (int32_t y : d->y) ++count[y];
  for (int c : count) EXPECT_EQ(c, 1000);  // the test set is balanced
}

}  // namespace
}  // namespace hetps
