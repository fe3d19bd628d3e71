#include "bench/train.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "bench/bench_cluster.h"

namespace hetps::bench {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Wall time of the first metrics row whose test accuracy reaches `target`; -1 if none.
double TimeToTarget(const std::string& metrics_csv, double target) {
  std::istringstream in(metrics_csv);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) f.push_back(cell);
    try {
      if (f.size() >= 5 && !f[4].empty() && std::stod(f[4]) >= target) return std::stod(f[0]);
    } catch (const std::exception&) {
      // a malformed row measures nothing
    }
  }
  return -1;
}

// One training run with the servers at durability `level` ("memory": no data dir; else a data
// dir under `data_root` at that level); prints its JSON line and returns its samples/s.
StatusOr<double> RunOnce(const TrainBenchOptions& o, const std::string& level,
                         const std::string& data_root) {
  BenchClusterOptions co;
  co.servers = o.servers;
  co.workers = o.workers;
  co.server_flags = {"--consistency=" + o.consistency, "--optimizer=adam:lr=0.001",
                     "--init=worker"};
  if (level != "memory") {
    std::error_code ec;
    std::filesystem::remove_all(data_root + "/" + level, ec);
    co.server_flags.push_back(fmt::format("--data_dir={}/{}/server{{i}}", data_root, level));
    co.server_flags.push_back("--durability=" + level);
  }
  auto cluster = BenchCluster::Start(co);
  if (!cluster.ok()) return cluster.status();
  const std::string run_dir = (*cluster)->dir() + "/run";
  for (int i = 0; i < o.workers; ++i) {
    std::vector<std::string> flags = {"--workload=train",
                                      "--model=" + o.model,
                                      fmt::format("--iterations={}", o.iterations),
                                      fmt::format("--eval_every={}", o.eval_every),
                                      "--progress_every=1000000",
                                      "--run_dir=" + run_dir,
                                      "--device=" + o.device};
    if (!o.codec.empty()) flags.push_back("--codec=" + o.codec);
    flags.push_back("--straggler=" + o.straggler);
    if (i == o.workers - 1 && o.straggler_slowdown > 1) {
      flags.push_back(fmt::format("--slowdown={}", o.straggler_slowdown));
    }
    if (Status s = (*cluster)->StartWorker(flags); !s.ok()) return s;
  }
  if (Status s = (*cluster)->WaitWorkers(); !s.ok()) return s;
  const std::string summary = Slurp(run_dir + "/summary.json");
  static const std::regex fields(
      R"re("test_accuracy":([0-9.]+),.*"wall_s":([0-9.]+).*"samples_per_s":([0-9.]+))re");
  std::smatch m;
  if (!std::regex_search(summary, m, fields)) {
    return Status::NotFound("no summary in " + run_dir);
  }
  // Where rank 0's mean step went, as shares of it (the summary holds seconds).
  static const std::regex step_fields(
      R"re("device":"([^"]*)","device_encoded_partitions":([0-9]+),"step_s":\{"pull":([0-9.]+),"push_wait":([0-9.]+),"compute":([0-9.]+),"encode":([0-9.]+),"clock":([0-9.]+)\})re");
  std::smatch st;
  std::string step_json = ",\"step_ms\":null,\"step_share\":null";
  if (std::regex_search(summary, st, step_fields)) {
    const char* names[] = {"pull", "push_wait", "compute", "encode", "clock"};
    double v[5], total = 0;
    for (int i = 0; i < 5; ++i) total += v[i] = std::stod(st[3 + i].str());
    std::string shares;
    for (int i = 0; i < 5; ++i) {
      shares +=
          fmt::format("{}\"{}\":{:.3f}", i ? "," : "", names[i], total > 0 ? v[i] / total : 0);
    }
    step_json = fmt::format(
        ",\"worker_device\":\"{}\",\"device_encoded_partitions\":{},\"step_ms\":{:.3f},"
        "\"step_share\":{{{}}}",
        st[1].str(), st[2].str(), total * 1e3, shares);
  }
  const double to_target = TimeToTarget(Slurp(run_dir + "/metrics.csv"), o.target);
  std::printf(
      "{\"bench\":\"train\",\"model\":\"%s\",\"consistency\":\"%s\",\"workers\":%d,\"servers\":%d,"
      "\"straggler_slowdown\":%.1f,\"straggler\":\"%s\",\"samples_per_s\":%s,\"final_test_"
      "accuracy\":%s,\"wall_s\":%s,"
      "\"target\":%.2f,\"time_to_target_s\":%s,\"device\":\"%s\",\"codec\":\"%s\","
      "\"durability\":\"%s\"%s}\n",
      o.model.c_str(), o.consistency.c_str(), o.workers, o.servers, o.straggler_slowdown,
      o.straggler.c_str(), m[3].str().c_str(), m[1].str().c_str(), m[2].str().c_str(), o.target,
      to_target < 0 ? "null" : fmt::format("{:.2f}", to_target).c_str(), o.device.c_str(),
      o.codec.c_str(), level.c_str(), step_json.c_str());
  std::fflush(stdout);
  return std::stod(m[3].str());
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int RunTrainBench(const TrainBenchOptions& o) {
  if (o.model != "mlp" && o.model != "cnn") {
    std::fprintf(stderr, "hetps-bench train: unknown --model=%s (mlp, cnn)\n", o.model.c_str());
    return 2;
  }
  std::string data_root;
  if (o.durability.size() > 1 || o.durability.front() != "memory") {
    char tmpl[] = "/tmp/hetps-bench-train-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::fprintf(stderr, "hetps-bench: cannot create a temporary directory\n");
      return 1;
    }
    data_root = tmpl;
  }
  // The levels run interleaved, `repeats` rounds of them, so a slow phase of the machine hits
  // them all alike; the medians are compared.
  std::map<std::string, std::vector<double>> samples;
  int code = 0;
  for (int r = 0; r < o.repeats && code == 0; ++r) {
    for (const std::string& level : o.durability) {
      auto run = RunOnce(o, level, data_root);
      if (!run.ok()) {
        std::fprintf(stderr, "hetps-bench: durability %s: %s\n", level.c_str(),
                     run.status().ToString().c_str());
        code = 1;
        break;
      }
      samples[level].push_back(*run);
    }
  }
  if (!data_root.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(data_root, ec);
  }
  if (code != 0 || o.durability.size() < 2 || !samples.contains("memory")) return code;
  const double memory = Median(samples["memory"]);
  for (const std::string& level : o.durability) {
    std::printf(
        "{\"bench\":\"train_durability\",\"model\":\"%s\",\"durability\":\"%s\",\"runs\":%zu,"
        "\"samples_per_s_median\":%.1f,\"samples_vs_memory\":%.3f}\n",
        o.model.c_str(), level.c_str(), samples[level].size(), Median(samples[level]),
        Median(samples[level]) / memory);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace hetps::bench
