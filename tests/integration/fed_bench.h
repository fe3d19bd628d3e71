// Small federated scenarios for the integration tests: a learnable image set written as IDX
// files, and `hetps fed` run over a scenario of six edge clients on it.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "tests/integration/local_cluster.h"
#include "tests/scratch_dir.h"

namespace hetps::testing {

inline void WriteIdxGz(const std::string& path, std::vector<int32_t> dims,
                       const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (int32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  }
  b.insert(b.end(), data.begin(), data.end());
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
}

// A small learnable image set: each of 10 classes lights its own pixels, plus noise.
inline void WriteData(const std::string& images, const std::string& labels, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> noise(0, 60);
  std::vector<uint8_t> x(static_cast<size_t>(n) * 36), y(n);
  for (int i = 0; i < n; ++i) {
    y[i] = static_cast<uint8_t>(rng() % 10);
    for (int p = 0; p < 36; ++p) {
      x[i * 36 + p] = static_cast<uint8_t>(noise(rng) + (p % 10 == y[i] ? 150 : 0));
    }
  }
  WriteIdxGz(images, {n, 6, 6}, x);
  WriteIdxGz(labels, {n}, y);
}

// `hetps fed` on a small scenario: the scenario file, the experiment's own options in it.
struct FedBench {
  ScratchDir dir{"edge_test"};
  std::string scenario, run_dir;
  FedBench(int uploads) {
    std::filesystem::create_directories(dir.path());
    const std::string images = Path("train-images.gz"), labels = Path("train-labels.gz");
    WriteData(images, labels, 400, 21);
    scenario = Path("small.flags");
    run_dir = Path("runs");
    std::ofstream(scenario) << fmt::format(
        "# six clients on a small image set\n--workload=edge\n--init=worker\n--hidden=8\n"
        "--train_images={0}\n--train_labels={1}\n--test_images={0}\n--test_labels={1}\n"
        "--data_cache={2}\n--partition=iid\n--data_seed=3\n--local_epochs=1\n--batch=8\n"
        "--local_lr=0.1\n--selection_seed=2\n--clients=6\n--parallel=3\n--per_round=2\n"
        "--uploads={3}\n--eval_uploads=4\n--target=0.3\n",
        images, labels, Path("cache"), uploads);
  }
  std::string Path(const std::string& name) const { return (dir.path() / name).string(); }

  // Starts `hetps fed <args>` with its output in `log`.
  pid_t Start(const std::string& args, const std::string& log) const {
    std::vector<std::string> argv = {Bin("hetps"), "fed"};
    std::istringstream in(args);
    for (std::string a; in >> a;) argv.push_back(a);
    SpawnOptions options;
    options.output_file = log;
    options.truncate = true;
    auto pid = Spawn(argv, options);
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    return pid.ok() ? *pid : -1;
  }
};

// The exit code once `pid` exited within `timeout` (128 + signal if killed), else -1.
inline int WaitCode(pid_t pid, std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// Two busy loops for as long as the object lives.
class CpuHogs {
 public:
  CpuHogs() {
    for (int i = 0; i < 2; ++i) {
      auto pid = Spawn({"/bin/sh", "-c", "while :; do :; done"}, {});
      if (pid.ok()) pids_.push_back(*pid);
    }
  }
  ~CpuHogs() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

 private:
  std::vector<pid_t> pids_;
};

}  // namespace hetps::testing
