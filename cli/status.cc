#include "cli/status.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cli/launch_args.h"
#include "cli/scheduler_call.h"

namespace hetps {
namespace {

using Json = nlohmann::json;

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

// A number, or "-" for null (not measured yet).
std::string Num(const Json& v, const char* format = "{:.1f}") {
  if (!v.is_number()) return "-";
  return fmt::format(fmt::runtime(format), v.get<double>());
}

// How a worker's large payloads reach the servers ("transports", one word per server rank):
// the distinct ways joined by '+', or "-" where the scheduler did not say.
std::string Via(const Json& w) {
  auto it = w.find("transports");
  if (it == w.end() || !it->is_array() || it->empty()) return "-";
  std::vector<std::string> seen;
  for (const Json& t : *it) {
    const std::string word = t.is_string() ? t.get<std::string>() : "?";
    if (std::find(seen.begin(), seen.end(), word) == seen.end()) seen.push_back(word);
  }
  return fmt::format("{}", fmt::join(seen, "+"));
}

// An integer field: a JSON integer, or a float that is a value of T (nlohmann's get<int>() of
// 1e300 is undefined behaviour; found by fuzz/status_json_fuzz). Anything else throws.
template <typename T>
T Int(const Json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(u);
    } else {
      const int64_t i = v.get<int64_t>();
      if (i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max()) {
        return static_cast<T>(i);
      }
    }
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    // T's bounds as doubles: max() + 1 is a power of two, exactly representable.
    const double above = 2.0 * static_cast<double>(std::numeric_limits<T>::max() / 2 + 1);
    if (d >= static_cast<double>(std::numeric_limits<T>::min()) && d < above) {
      return static_cast<T>(d);
    }
  } else {
    return v.get<T>();  // throws the library's type error
  }
  throw std::out_of_range(fmt::format("{} is not a {}-bit integer", v.dump(), sizeof(T) * 8));
}

// Int of field `key`, or `otherwise` when it is missing.
int64_t IntOr(const Json& object, const char* key, int64_t otherwise) {
  return object.contains(key) ? Int<int64_t>(object.at(key)) : otherwise;
}

std::atomic<bool> interrupted{false};

// One line per server and sparse table (none when no server holds a table).
std::string TablesText(const Json& servers) {
  std::string out;
  for (const Json& s : servers) {
    if (!s.contains("tables")) continue;  // a scheduler from before tables
    for (const Json& t : s.at("tables")) {
      if (out.empty()) {
        out = fmt::format("\n{:<16} {:>6} {:>12} {:>10} {:>9} {:>9} {:>10} {:>10}\n", "TABLE",
                          "SERVER", "ROWS", "HELD", "B/ROW", "HIT_RATE", "EVICTED", "ADMITTED");
      }
      const double hits = t.at("hits").get<double>(), misses = t.at("misses").get<double>();
      out += fmt::format("{:<16} {:>6} {:>12} {:>10} {:>9.1f} {:>9} {:>10} {:>10}\n",
                         t.at("name").get<std::string>(), Int<int>(s.at("rank")),
                         Int<int64_t>(t.at("rows")), Bytes(t.at("bytes").get<double>()),
                         t.at("bytes_per_row").get<double>(),
                         hits + misses > 0 ? fmt::format("{:.3f}", hits / (hits + misses)) : "-",
                         Int<int64_t>(t.at("evicted")), Int<int64_t>(t.at("admitted")));
    }
  }
  return out;
}

// A worker's device, short: "cpu", "cuda:1" (the GPU's name is in /api/status), "-" unknown.
std::string DeviceOf(const Json& w) {
  const std::string d = w.contains("device") ? w.at("device").get<std::string>() : "";
  if (d.empty()) return "-";
  return d.substr(0, d.find(' '));
}

// The aggregation tier's aggregators (docs/aggregation-tier.md), when the cluster has any;
// SLOTS is what a switch's aggregation slots hold now ("-": it sums whole pushes).
std::string AggregatorsText(const Json& j) {
  if (!j.contains("aggregators") || j.at("aggregators").empty()) return "";
  std::string out = fmt::format(
      "\n{:>4} {:>4} {:<6} {:>5} {:>9} {:>9} {:>10} {:>10} {:>9} {:>4} {:>10}  {}\n", "RANK",
      "NODE", "STATE", "GROUP", "PUSHES", "SUMS", "IN", "UP", "PULLS", "OPEN", "SLOTS", "ADDRESS");
  for (const Json& a : j.at("aggregators")) {
    const bool sw = a.value("switch_chunk", 0) > 0;
    out += fmt::format("{:>4} {:>4} {:<6} {:>5} {:>9} {:>9} {:>10} {:>10} {:>9} {:>4} {:>10}  {}\n",
                       Int<int>(a.at("rank")), Int<int>(a.at("id")),
                       a.at("state").get<std::string>(), Int<int>(a.at("group")),
                       Int<int64_t>(a.at("pushes")), Int<int64_t>(a.at("sums")),
                       Bytes(a.at("bytes_in").get<double>()), Bytes(a.at("bytes_up").get<double>()),
                       Int<int64_t>(a.at("pulls")), Int<int64_t>(a.at("open_sums")),
                       sw ? Bytes(a.value("slot_bytes", 0.0)) : std::string("-"),
                       a.at("address").get<std::string>());
  }
  return out;
}

// The servers' per-layer figures, with the layer-wise schedule's period, relative gradient and
// bytes saved beside them (a scheduler without a schedule's figures shows "-").
std::string LayersText(const Json& j) {
  std::map<int64_t, const Json*> planned;
  std::string out;
  if (j.contains("layer_schedule") && j.at("layer_schedule").is_object()) {
    const Json& s = j.at("layer_schedule");
    for (const Json& l : s.at("layers")) planned[Int<int64_t>(l.at("layer"))] = &l;
    out += fmt::format(
        "\nlayer schedule {}: {} saved (raw gradient bytes accumulated instead of "
        "pushed)\n",
        s.at("spec").get<std::string>(), Bytes(s.at("deferred_bytes").get<double>()));
  }
  if (j.at("layers").empty() && planned.empty()) return out;
  std::map<int64_t, const Json*> served;
  for (const Json& l : j.at("layers")) served[Int<int64_t>(l.at("layer"))] = &l;
  std::set<int64_t> layers;
  for (const auto& [l, v] : served) layers.insert(l);
  for (const auto& [l, v] : planned) layers.insert(l);
  out += fmt::format("\n{:>5} {:>10} {:>10} {:>12} {:>10} {:>9} {:>6} {:>8} {:>10}\n", "LAYER",
                     "PUSHES", "PUSH/MIN", "BYTES", "STALE_AVG", "STALE_MAX", "PERIOD", "REL_GRAD",
                     "SAVED");
  for (int64_t layer : layers) {
    std::string served_text =
        fmt::format("{:>10} {:>10} {:>12} {:>10} {:>9}", "-", "-", "-", "-", "-");
    if (auto it = served.find(layer); it != served.end()) {
      const Json& l = *it->second;
      served_text =
          fmt::format("{:>10} {:>10.0f} {:>12} {:>10.2f} {:>9}", Int<int64_t>(l.at("pushes")),
                      l.at("pushes_per_min").get<double>(), Bytes(l.at("bytes").get<double>()),
                      l.at("mean_staleness").get<double>(), Int<int64_t>(l.at("max_staleness")));
    }
    std::string plan = fmt::format("{:>6} {:>8} {:>10}", "-", "-", "-");
    if (auto it = planned.find(layer); it != planned.end()) {
      const Json& l = *it->second;
      const double r = l.at("relative_gradient").get<double>();
      plan = fmt::format("{:>6} {:>8} {:>10}", Int<int64_t>(l.at("period")),
                         r < 0 ? std::string("-") : fmt::format("{:.4f}", r),
                         Bytes(l.at("deferred_bytes").get<double>()));
    }
    out += fmt::format("{:>5} {} {}\n", layer, served_text, plan);
  }
  return out;
}

}  // namespace

StatusOr<StatusArgs> ParseStatusArgs(const std::vector<std::string>& args) {
  StatusArgs out;
  for (const std::string& a : args) {
    const auto [name, value, has_value] = SplitArg(a);
    if (out.auth.TakeArg(a)) continue;
    if (name == "--scheduler" && !value.empty()) {
      out.scheduler = value;
    } else if (name == "--json" && !has_value) {
      out.json = true;
    } else if (name == "--watch") {
      out.watch_s = 2;
      if (has_value) {
        char* end = nullptr;
        out.watch_s = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !(out.watch_s >= 0.1) || out.watch_s > 3600) {
          return Status::InvalidArgument(
              fmt::format("--watch takes seconds in [0.1, 3600], got '{}'", value));
        }
      }
    } else if (name == "--timeout_ms" && !value.empty()) {
      auto v = IntArg("timeout_ms", value, 1);
      if (!v.ok()) return v.status();
      out.timeout_ms = *v;
    } else {
      return Status::InvalidArgument(fmt::format("unknown argument '{}'", a));
    }
  }
  if (Status s = out.auth.UseRun(out.scheduler); !s.ok()) return s;
  if (out.scheduler.empty())
    return Status::InvalidArgument("--scheduler=tcp://host:port (or --run_dir=RUN) is required");
  return out;
}

StatusOr<std::string> FetchStatus(const std::string& scheduler, const OperatorAuth& auth,
                                  int timeout_ms) {
  proto::Header h;
  h.set_type(proto::STATUS);
  auto reply = CallScheduler(scheduler, auth, std::move(h), timeout_ms);
  if (!reply.ok()) return reply.status();
  return reply->status_json();
}

StatusOr<std::string> RenderStatus(const std::string& status_json) {
  const Json j = Json::parse(status_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("workers")) {
    return Status::Malformed("the scheduler's status is not the JSON expected");
  }
  try {
    const Json& c = j.at("cluster");
    std::string out = fmt::format(
        "hetps  up {:.0f} s  consistency {}  workers {}  servers {}  clocks {}..{}  quorum {}  "
        "stragglers {}\n\n",
        c.at("uptime_s").get<double>(), c.at("consistency").get<std::string>(),
        Int<int>(c.at("workers")), Int<int>(c.at("servers")), Int<int64_t>(c.at("min_clock")),
        Int<int64_t>(c.at("max_clock")), Int<int64_t>(c.at("quorum")), c.at("stragglers").size());
    if (c.contains("checkpoint") && c.at("checkpoint").is_object()) {
      const Json& k = c.at("checkpoint");
      out.insert(out.size() - 1,
                 fmt::format("last checkpoint: clock {}, {:.1f} MiB written in {:.2f} s, {:.0f} s "
                             "ago, {}\n",
                             Int<int64_t>(k.at("clock")), Int<int64_t>(k.at("bytes")) / 1048576.0,
                             k.at("write_s").get<double>(), k.at("age_s").get<double>(),
                             k.at("dir").get<std::string>()));
    }
    if (j.contains("federated") && j.at("federated").is_object()) {
      const Json& f = j.at("federated");
      const Json& n = f.at("clients");
      std::string measured;
      if (f.contains("measured") && !f.at("measured").empty()) {
        const Json& m = f.at("measured").back();
        measured = fmt::format("; test accuracy {:.4f} after {} aggregations",
                               m.at(2).get<double>(), Int<int64_t>(m.at(0)));
      }
      out.insert(
          out.size() - 1,
          fmt::format("federated ({}, {}): {} of {} aggregations applied; clients idle {}, "
                      "training {}, uploaded {}, away {}, left {}; evaluators {}; uploads "
                      "kept {}, dropped {}; uplink {}, downlink {}{}\n",
                      f.at("mode").get<std::string>(), f.at("selection").get<std::string>(),
                      Int<int64_t>(f.at("applied")), Int<int64_t>(f.at("rounds")),
                      Int<int>(n.at("idle")), Int<int>(n.at("training")),
                      Int<int>(n.at("uploaded")), Int<int>(n.at("away")), Int<int>(n.at("left")),
                      Int<int>(n.at("evaluator")), IntOr(f, "kept", 0), IntOr(f, "dropped", 0),
                      Bytes(IntOr(f, "bytes_up", 0)), Bytes(IntOr(f, "bytes_down", 0)), measured));
      if (f.contains("privacy") && f.at("privacy").is_object()) {
        const Json& p = f.at("privacy");
        out.insert(out.size() - 1,
                   fmt::format("differential privacy {}: epsilon {:.3f} spent at delta {:g}\n",
                               p.at("dp").get<std::string>(), p.at("epsilon").get<double>(),
                               p.at("delta").get<double>()));
      }
      if (f.contains("secure") && f.at("secure").is_object()) {
        const Json& s = f.at("secure");
        out.insert(out.size() - 1,
                   fmt::format("secure aggregation {}: {} rounds unmasked, {} applied nothing\n",
                               s.at("spec").get<std::string>(), IntOr(s, "unmasked", 0),
                               IntOr(s, "aborted", 0)));
      }
    }
    if (j.contains("virtual") && j.at("virtual").is_object()) {
      const Json& v = j.at("virtual");
      std::vector<int> ranks;
      for (const Json& r : v.at("waiting_for")) ranks.push_back(Int<int>(r));
      const int turn = IntOr(v, "turn", -1);
      out.insert(
          out.size() - 1,
          fmt::format("virtual time {:.1f} s: {} requests held{}{}\n", v.at("now_s").get<double>(),
                      IntOr(v, "held", 0),
                      ranks.empty() ? std::string()
                                    : fmt::format(", waiting for ranks {}", fmt::join(ranks, " ")),
                      turn < 0 ? std::string() : fmt::format("; rank {}'s turn", turn)));
    }
    out += fmt::format(
        "{:>4} {:>4} {:<6} {:>7} {:>9} {:>8} {:>8} {:>9} {:>6} {:>10} {:>10} {:<10} {:<8} {:>7} "
        "{:>8}  {}\n",
        "RANK", "NODE", "STATE", "CLOCK", "ITER_MS", "±SD", "WAIT_MS", "BUSY_MS", "STALE", "PUSHED",
        "PULLED", "VIA", "DEVICE", "HB_MS", "LOSS", "FLAG");
    for (const Json& w : j.at("workers")) {
      const Json& m = w.at("metrics");
      std::string flag = w.at("straggler").get<bool>()
                             ? "STRAGGLER (" + w.at("straggler_reason").get<std::string>() + ")"
                             : "";
      out += fmt::format(
          "{:>4} {:>4} {:<6} {:>7} {:>9} {:>8} {:>8} {:>9} {:>6} {:>10} {:>10} {:<10} {:<8} "
          "{:>7.0f} {:>8}  {}\n",
          Int<int>(w.at("rank")), Int<int>(w.at("id")), w.at("state").get<std::string>(),
          Int<int64_t>(w.at("clock")), Num(w.at("iteration_ms")), Num(w.at("iteration_ms_stddev")),
          Num(w.at("wait_ms")), Num(w.at("busy_ms"), "{:.0f}"), Num(w.at("staleness"), "{:.2f}"),
          Bytes(w.at("bytes_pushed").get<double>()), Bytes(w.at("bytes_pulled").get<double>()),
          Via(w), DeviceOf(w), w.at("heartbeat_age_ms").get<double>(),
          m.contains("loss") ? Num(m.at("loss"), "{:.4f}") : "-", flag);
    }
    out += fmt::format("\n{:>4} {:>4} {:<6} {:>10} {:>10} {:>9} {:>11} {:>12}  {}\n", "RANK",
                       "NODE", "STATE", "PARTITIONS", "HELD", "REQ/S", "PARKED_PULL",
                       "PARKED_CLOCK", "ADDRESS");
    for (const Json& s : j.at("servers")) {
      out += fmt::format("{:>4} {:>4} {:<6} {:>10} {:>10} {:>9.0f} {:>11} {:>12}  {}\n",
                         Int<int>(s.at("rank")), Int<int>(s.at("id")),
                         s.at("state").get<std::string>(), Int<int64_t>(s.at("partitions")),
                         Bytes(s.at("bytes_held").get<double>()),
                         s.at("requests_per_s").get<double>(), Int<int64_t>(s.at("parked_pulls")),
                         Int<int64_t>(s.at("parked_clocks")), s.at("address").get<std::string>());
    }
    out += TablesText(j.at("servers"));
    out += AggregatorsText(j);
    out += LayersText(j);
    return out;
  } catch (const Json::exception& e) {
    return Status::Malformed(fmt::format("the scheduler's status lacks a field: {}", e.what()));
  } catch (const std::out_of_range& e) {
    return Status::Malformed(
        fmt::format("the scheduler's status has a field out of range: {}", e.what()));
  }
}

int RunStatus(const StatusArgs& args) {
  if (args.watch_s > 0) {
    struct sigaction sa = {};
    sa.sa_handler = [](int) { interrupted = true; };
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  }
  do {
    auto json = FetchStatus(args.scheduler, args.auth, args.timeout_ms);
    std::string text;
    if (!json.ok()) {
      text = fmt::format("hetps status: {}\n", json.status().ToString());
      if (args.watch_s <= 0) return std::fputs(text.c_str(), stderr), 1;
    } else if (args.json) {
      text = *json + "\n";
    } else {
      auto rendered = RenderStatus(*json);
      if (!rendered.ok()) {
        std::fprintf(stderr, "hetps status: %s\n", rendered.status().ToString().c_str());
        return 1;
      }
      text = *rendered;
    }
    if (args.watch_s > 0 && !args.json) std::fputs("\033[H\033[2J", stdout);  // like top
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(args.watch_s);
    while (args.watch_s > 0 && !interrupted && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } while (args.watch_s > 0 && !interrupted);
  return 0;
}

}  // namespace hetps
