#include "cli/ctl.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>

#include "cli/scheduler_call.h"

namespace hetps {
namespace {

StatusOr<int64_t> NonNegative(const std::string& key, const std::string& value) {
  try {
    size_t used = 0;
    long long v = std::stoll(value, &used);
    if (used == value.size() && v >= 0) return static_cast<int64_t>(v);
  } catch (const std::exception&) {
  }
  return Status::InvalidArgument(fmt::format("{} needs an integer >= 0, got '{}'", key, value));
}

// export --table=NAME --out=DIR [--full], from args[i + 1] on.
Status ParseExport(const std::vector<std::string>& args, size_t i, CtlArgs& out) {
  out.command = CtlArgs::Command::kExport;
  for (++i; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--table=", 0) == 0) {
      out.exports.set_table(a.substr(8));
    } else if (a.rfind("--out=", 0) == 0 && a.size() > 6) {
      std::error_code ec;
      out.exports.set_dir(std::filesystem::absolute(a.substr(6), ec).lexically_normal().string());
    } else if (a == "--full") {
      out.exports.set_full(true);
    } else {
      return Status::InvalidArgument(
          fmt::format("export: unknown argument '{}' (export --table=NAME --out=DIR [--full])", a));
    }
  }
  if (out.exports.table().empty() || out.exports.dir().empty()) {
    return Status::InvalidArgument("export needs --table=NAME and --out=DIR");
  }
  return Status();
}

// drain-server --rank=N, from args[i + 1] on.
Status ParseDrain(const std::vector<std::string>& args, size_t i, CtlArgs& out) {
  out.command = CtlArgs::Command::kDrain;
  for (++i; i < args.size(); ++i) {
    if (args[i].rfind("--rank=", 0) != 0) {
      return Status::InvalidArgument(
          fmt::format("drain-server: unknown argument '{}' (drain-server --rank=N)", args[i]));
    }
    auto v = NonNegative("--rank", args[i].substr(7));
    if (!v.ok()) return v.status();
    out.rank = static_cast<int>(*v);
  }
  if (out.rank < 0) return Status::InvalidArgument("drain-server needs --rank=N");
  return Status();
}

// move --partitions=P[,P...] --to=RANK, from args[i + 1] on.
Status ParseMove(const std::vector<std::string>& args, size_t i, CtlArgs& out) {
  out.command = CtlArgs::Command::kMove;
  std::vector<int64_t> partitions;
  const char* usage = "move --partitions=P[,P...] --to=RANK";
  for (++i; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--to=", 0) == 0) {
      auto v = NonNegative("--to", a.substr(5));
      if (!v.ok()) return v.status();
      out.rank = static_cast<int>(*v);
    } else if (a.rfind("--partitions=", 0) == 0) {
      std::string list = a.substr(13);
      for (size_t start = 0; start <= list.size();) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        auto v = NonNegative("--partitions", list.substr(start, comma - start));
        if (!v.ok()) return v.status();
        partitions.push_back(*v);
        start = comma + 1;
      }
    } else {
      return Status::InvalidArgument(fmt::format("move: unknown argument '{}' ({})", a, usage));
    }
  }
  if (partitions.empty() || out.rank < 0) {
    return Status::InvalidArgument(fmt::format("move needs --partitions and --to ({})", usage));
  }
  for (int64_t p : partitions) {
    proto::PartitionMove* e = out.move.add_entries();
    e->set_partition(static_cast<int32_t>(p));
    e->set_rank(out.rank);
  }
  return Status();
}

}  // namespace

StatusOr<CtlArgs> ParseCtlArgs(const std::vector<std::string>& args) {
  CtlArgs out;
  bool timeout_given = false;
  size_t i = 0;
  for (; i < args.size() && args[i].rfind("--", 0) == 0; ++i) {
    const std::string& a = args[i];
    if (out.auth.TakeArg(a)) {
      continue;
    } else if (a.rfind("--scheduler=", 0) == 0) {
      out.scheduler = a.substr(12);
    } else if (a.rfind("--timeout_ms=", 0) == 0) {
      auto v = NonNegative("--timeout_ms", a.substr(13));
      if (!v.ok()) return v.status();
      out.timeout_ms = static_cast<int>(*v);
      timeout_given = true;
    } else {
      return Status::InvalidArgument(fmt::format("unknown option '{}'", a));
    }
  }
  if (Status s = out.auth.UseRun(out.scheduler); !s.ok()) return s;
  if (out.scheduler.empty())
    return Status::InvalidArgument("--scheduler=tcp://host:port (or --run_dir=RUN) is required");
  if (i < args.size() && args[i] == "checkpoint") {
    if (i + 1 != args.size()) {
      return Status::InvalidArgument(
          fmt::format("checkpoint takes no arguments, got '{}'", args[i + 1]));
    }
    out.command = CtlArgs::Command::kCheckpoint;
    if (!timeout_given) out.timeout_ms = 600000;
    return out;
  }
  if (i < args.size() && args[i] == "export") {
    if (Status s = ParseExport(args, i, out); !s.ok()) return s;
    if (!timeout_given) out.timeout_ms = 600000;
    return out;
  }
  if (i < args.size() && args[i] == "drain-server") {
    if (Status s = ParseDrain(args, i, out); !s.ok()) return s;
    if (!timeout_given) out.timeout_ms = 70000;  // the scheduler calls a drain off after 60 s
    return out;
  }
  if (i < args.size() && args[i] == "move") {
    if (Status s = ParseMove(args, i, out); !s.ok()) return s;
    if (!timeout_given) out.timeout_ms = 100000;  // the scheduler calls a move off after 90 s
    return out;
  }
  if (i >= args.size() || args[i] != "set") {
    return Status::InvalidArgument(
        "expected: set consistency=SPEC|layer_schedule=SPEC, checkpoint, export --table=NAME "
        "--out=DIR, drain-server --rank=N, or move --partitions=P[,P...] --to=RANK");
  }
  for (++i; i < args.size(); ++i) {
    const std::string& kv = args[i];
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(fmt::format("'{}' is not key=value", kv));
    }
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key != "consistency" && key != "layer_schedule") {
      return Status::InvalidArgument(
          fmt::format("unknown key '{}' (known: consistency, layer_schedule; parameters go in "
                      "the spec, e.g. consistency=ssp:staleness=4)",
                      key));
    }
    if (value.empty() || value.front() == ':') {
      return Status::InvalidArgument(
          fmt::format("{} needs a spec, e.g. {}", key,
                      key == "consistency" ? "ssp:staleness=4" : "fixed:deep=4"));
    }
    if (key == "consistency") {
      out.policy.set_consistency(value);
    } else {
      out.policy.set_layer_schedule(value);
    }
  }
  if (out.policy.consistency().empty() && out.policy.layer_schedule().empty()) {
    return Status::InvalidArgument(
        "set needs consistency=SPEC and/or layer_schedule=SPEC, e.g. "
        "consistency=ssp:staleness=4");
  }
  return out;
}

StatusOr<std::string> RunCtl(const CtlArgs& args) {
  proto::Header h;
  if (args.command == CtlArgs::Command::kCheckpoint) {
    h.set_type(proto::CHECKPOINT);
    auto r = CallScheduler(args.scheduler, args.auth, std::move(h), args.timeout_ms);
    if (!r.ok()) return r.status();
    return fmt::format("checkpoint at clock {}: {:.1f} MiB in {:.2f} s, {}", r->cut().clock(),
                       r->cut().bytes() / 1048576.0, r->cut().seconds(), r->cut().dir());
  }
  if (args.command == CtlArgs::Command::kExport) {
    h.set_type(proto::EXPORT);
    *h.mutable_table_export() = args.exports;
    auto r = CallScheduler(args.scheduler, args.auth, std::move(h), args.timeout_ms);
    if (!r.ok()) return r.status();
    const proto::TableExport& e = r->table_export();
    int full = 0;
    for (const proto::BucketExport& f : e.files()) full += f.full();
    return fmt::format(
        "table '{}' exported: {} rows, {} tombstones in {} bucket files ({} full) "
        "in {:.2f} s, {}",
        e.table(), e.rows(), e.tombstones(), e.files_size(), full, e.seconds(), e.dir());
  }
  if (args.command == CtlArgs::Command::kDrain) {
    h.set_type(proto::DRAIN);
    h.set_rank(args.rank);
    const auto start = std::chrono::steady_clock::now();
    auto r = CallScheduler(args.scheduler, args.auth, std::move(h), args.timeout_ms);
    if (!r.ok()) return r.status();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r->node() < 0) {  // no backup: its partitions moved to the other ranks
      return fmt::format(
          "server rank {} drained: its partitions serve from the other ranks and it is retired "
          "(shard map epoch {}) after {:.3f} s",
          r->rank(), r->move().epoch(), seconds);
    }
    return fmt::format("server rank {} handed from node {} to node {} (epoch {}) in {:.3f} s",
                       r->rank(), r->replica().primary(), r->node(), r->replica().epoch(), seconds);
  }
  if (args.command == CtlArgs::Command::kMove) {
    h.set_type(proto::MOVE);
    *h.mutable_move() = args.move;
    const auto start = std::chrono::steady_clock::now();
    auto r = CallScheduler(args.scheduler, args.auth, std::move(h), args.timeout_ms);
    if (!r.ok()) return r.status();
    return fmt::format(
        "{} partition(s) moved to server rank {} in {:.3f} s (shard map epoch {})",
        args.move.entries_size(), args.rank,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
        r->move().epoch());
  }
  h.set_type(proto::SET_POLICY);
  *h.mutable_policy() = args.policy;
  if (auto r = CallScheduler(args.scheduler, args.auth, std::move(h), args.timeout_ms); !r.ok()) {
    return r.status();
  }
  std::vector<std::string> done;
  if (!args.policy.layer_schedule().empty()) {
    done.push_back(
        fmt::format("layer schedule {} set on the scheduler (workers follow it from "
                    "their next heartbeat)",
                    args.policy.layer_schedule()));
  }
  if (!args.policy.consistency().empty()) {
    done.push_back(
        fmt::format("consistency {} applied on every server", args.policy.consistency()));
  }
  return fmt::format("{}", fmt::join(done, "; "));
}

}  // namespace hetps
