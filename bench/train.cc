#include "bench/train.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <sstream>

#include "bench/bench_cluster.h"
#include "bench/server_host.h"

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

struct Measured {
  double samples_per_s = 0;
  double time_to_target_s = -1;  // -1: not reached
};

// What varies between a benchmark's runs: the servers' durability level, the aggregators, the
// workers' data seed (0: their default).
struct Variant {
  std::string level = "memory";
  int aggregators = 0;
  int seed = 0;
};

// One training run with the servers at durability v.level ("memory": no data dir; else a data
// dir under `data_root` at that level); prints its JSON line.
StatusOr<Measured> RunOnce(const TrainBenchOptions& o, const Variant& v,
                           const std::string& data_root, const ServerHost* host) {
  const std::string& level = v.level;
  BenchClusterOptions co;
  co.servers = o.servers;
  co.workers = o.workers;
  co.aggregators = v.aggregators;
  if (host != nullptr) host->Place(co);
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
    if (v.seed > 0) flags.push_back(fmt::format("--data_seed={}", v.seed));
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
      "\"durability\":\"%s\",\"aggregators\":%d,\"links\":\"%s\",\"data_seed\":%d%s}\n",
      o.model.c_str(), o.consistency.c_str(), o.workers, o.servers, o.straggler_slowdown,
      o.straggler.c_str(), m[3].str().c_str(), m[1].str().c_str(), m[2].str().c_str(), o.target,
      to_target < 0 ? "null" : fmt::format("{:.2f}", to_target).c_str(), o.device.c_str(),
      o.codec.c_str(), level.c_str(), v.aggregators, o.links.c_str(), v.seed, step_json.c_str());
  std::fflush(stdout);
  return Measured{std::stod(m[3].str()), to_target};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median time to target of each aggregator count (a run that missed it counts as never),
// and its ratio to the first count's.
void PrintTierComparison(const TrainBenchOptions& o, std::map<int, std::vector<double>>& times) {
  auto median = [](std::vector<double> v) {
    for (double& t : v) t = t < 0 ? std::numeric_limits<double>::infinity() : t;
    return Median(v);
  };
  const double first = median(times[o.aggregators.front()]);
  for (int n : o.aggregators) {
    const double m = median(times[n]);
    std::printf(
        "{\"bench\":\"train_tier\",\"model\":\"%s\",\"consistency\":\"%s\",\"workers\":%d,"
        "\"aggregators\":%d,\"links\":\"%s\",\"link_mbps\":%g,\"runs\":%zu,\"target\":%.2f,"
        "\"time_to_target_s_median\":%s,\"time_vs_first\":%s}\n",
        o.model.c_str(), o.consistency.c_str(), o.workers, n, o.links.c_str(), o.link_mbps,
        times[n].size(), o.target, std::isfinite(m) ? fmt::format("{:.2f}", m).c_str() : "null",
        std::isfinite(m) && std::isfinite(first) ? fmt::format("{:.3f}", m / first).c_str()
                                                 : "null");
  }
  std::fflush(stdout);
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
  auto host = ServerHost::ForLinks(o.links, o.link_mbps);
  if (!host.ok()) {
    std::fprintf(stderr, "hetps-bench train: %s\n", host.status().ToString().c_str());
    return 1;
  }
  // The variants run interleaved, `repeats` rounds of them, so a slow phase of the machine hits
  // them all alike; the medians are compared.
  std::map<std::string, std::vector<double>> samples;
  std::map<int, std::vector<double>> to_target;  // per aggregator count
  int code = 0;
  const bool tiers = o.aggregators.size() > 1;
  for (int r = 0; r < o.repeats && code == 0; ++r) {
    for (const std::string& level : o.durability) {
      for (int aggregators : o.aggregators) {
        const Variant v{level, aggregators, tiers ? r + 1 : 0};
        auto run = RunOnce(o, v, data_root, host->get());
        if (!run.ok()) {
          std::fprintf(stderr, "hetps-bench: durability %s, %d aggregator(s): %s\n", level.c_str(),
                       aggregators, run.status().ToString().c_str());
          code = 1;
          break;
        }
        samples[level].push_back(run->samples_per_s);
        to_target[aggregators].push_back(run->time_to_target_s);
      }
      if (code != 0) break;
    }
  }
  if (code == 0 && tiers) PrintTierComparison(o, to_target);
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
