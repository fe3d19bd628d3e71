#include "bench/train.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
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

}  // namespace

int RunTrainBench(const TrainBenchOptions& o) {
  if (o.model != "mlp" && o.model != "cnn") {
    std::fprintf(stderr, "hetps-bench train: unknown --model=%s (mlp, cnn)\n", o.model.c_str());
    return 2;
  }
  BenchClusterOptions co;
  co.servers = o.servers;
  co.workers = o.workers;
  co.server_flags = {"--consistency=" + o.consistency, "--optimizer=adam:lr=0.001",
                     "--init=worker"};
  auto cluster = BenchCluster::Start(co);
  if (!cluster.ok()) {
    std::fprintf(stderr, "hetps-bench: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
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
    if (i == o.workers - 1 && o.straggler_slowdown > 1) {
      flags.push_back(fmt::format("--slowdown={}", o.straggler_slowdown));
    }
    if (Status s = (*cluster)->StartWorker(flags); !s.ok()) {
      std::fprintf(stderr, "hetps-bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (Status s = (*cluster)->WaitWorkers(); !s.ok()) {
    std::fprintf(stderr, "hetps-bench: %s\n", s.ToString().c_str());
    return 1;
  }
  const std::string summary = Slurp(run_dir + "/summary.json");
  static const std::regex fields(
      R"re("test_accuracy":([0-9.]+),"wall_s":([0-9.]+).*"samples_per_s":([0-9.]+))re");
  std::smatch m;
  if (!std::regex_search(summary, m, fields)) {
    std::fprintf(stderr, "hetps-bench: no summary in %s\n", run_dir.c_str());
    return 1;
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
      "\"straggler_slowdown\":%.1f,\"samples_per_s\":%s,\"final_test_accuracy\":%s,\"wall_s\":%s,"
      "\"target\":%.2f,\"time_to_target_s\":%s,\"device\":\"%s\",\"codec\":\"%s\"%s}\n",
      o.model.c_str(), o.consistency.c_str(), o.workers, o.servers, o.straggler_slowdown,
      m[3].str().c_str(), m[1].str().c_str(), m[2].str().c_str(), o.target,
      to_target < 0 ? "null" : fmt::format("{:.2f}", to_target).c_str(), o.device.c_str(),
      o.codec.c_str(), step_json.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace hetps::bench
