#include "cli/launch_args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

namespace hetps {
namespace {

StatusOr<int> ParseCount(const std::string& name, const std::string& value, int min) {
  try {
    size_t used = 0;
    int v = std::stoi(value, &used);
    if (used == value.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  return Status::InvalidArgument(
      fmt::format("--{} needs an integer >= {}, got '{}'", name, min, value));
}

// "RANK:FACTOR", e.g. "2:3" (worker rank 2 computes 3x slower).
Status ParseSlowWorker(const std::string& value, std::map<int, double>& out) {
  const size_t colon = value.find(':');
  auto bad = [&] {
    return Status::InvalidArgument(fmt::format(
        "--slow_worker needs RANK:FACTOR with RANK >= 0 and FACTOR >= 1, got '{}'", value));
  };
  if (colon == std::string::npos) return bad();
  auto rank = ParseCount("slow_worker", value.substr(0, colon), 0);
  if (!rank.ok()) return bad();
  try {
    size_t used = 0;
    const std::string f = value.substr(colon + 1);
    const double factor = std::stod(f, &used);
    if (used != f.size() || !(factor >= 1) || factor > 1e6) return bad();
    out[*rank] = factor;
  } catch (const std::exception&) {
    return bad();
  }
  return Status();
}

// "no", "on-failure" (3 restarts) or "on-failure:N".
Status ParseRestart(const std::string& value, int& max_restarts) {
  if (value == "no") {
    max_restarts = 0;
    return Status();
  }
  if (value == "on-failure") {
    max_restarts = 3;
    return Status();
  }
  if (value.rfind("on-failure:", 0) == 0) {
    auto n = ParseCount("restart", value.substr(11), 1);
    if (n.ok()) {
      max_restarts = *n;
      return Status();
    }
  }
  return Status::InvalidArgument(
      fmt::format("--restart must be no, on-failure or on-failure:N (N >= 1), got '{}'", value));
}

// One of hetps launch's own options other than --flagfile.
Status SetOwnOption(const std::string& name, const std::string& value, LaunchArgs& out) {
  if (name == "servers" || name == "workers" || name == "grace_ms" ||
      name == "workers_per_process") {
    auto v = ParseCount(name, value, name == "grace_ms" ? 0 : 1);
    if (!v.ok()) return v.status();
    (name == "servers"    ? out.servers
     : name == "workers"  ? out.workers
     : name == "grace_ms" ? out.grace_ms
                          : out.workers_per_process) = *v;
  } else if (name == "run_dir") {
    out.run_dir = value;
  } else if (name == "slow_worker") {
    return ParseSlowWorker(value, out.slow_workers);
  } else if (name == "restart") {
    return ParseRestart(value, out.max_restarts);
  } else if (name == "links") {
    if (value != "transport" && value != "netns") {
      return Status::InvalidArgument("--links must be transport or netns, got '" + value + "'");
    }
    out.links = value;
  } else if (name == "netns_subnet") {
    const std::regex two_octets(R"((25[0-5]|2[0-4]\d|1?\d?\d)\.(25[0-5]|2[0-4]\d|1?\d?\d))");
    if (!std::regex_match(value, two_octets)) {
      return Status::InvalidArgument("--netns_subnet needs two octets, e.g. 10.203; got '" + value +
                                     "'");
    }
    out.netns_subnet = value;
  } else if (name == "H" || name == "hosts") {
    auto hosts = name == "H" ? ParseHostList(value) : ReadHostsFile(value);
    if (!hosts.ok()) return hosts.status();
    out.hosts = *hosts;
  } else if (name == "ssh") {
    std::istringstream words(value);
    out.ssh.clear();
    for (std::string w; words >> w;) out.ssh.push_back(w);
    if (out.ssh.empty()) return Status::InvalidArgument("--ssh needs a command, e.g. ssh -p 2222");
  } else if (name == "scheduler_port") {
    auto port = IntArg(name, value, 1);
    if (!port.ok() || *port > 65535) {
      return Status::InvalidArgument("--scheduler_port needs a port in 1..65535, got '" + value +
                                     "'");
    }
    out.scheduler_port = *port;
  } else if (name == "remote_bin_dir") {
    out.remote_bin_dir = value;
  } else if (name == "worker_cmd") {
    std::istringstream words(value);
    out.worker_cmd.clear();
    for (std::string w; words >> w;) out.worker_cmd.push_back(w);
    if (out.worker_cmd.empty()) {
      return Status::InvalidArgument("--worker_cmd needs a command, e.g. python3 train.py");
    }
  } else {
    out.bin_dir = value;
  }
  return Status();
}

}  // namespace

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

Status ReadFlagfile(const std::string& path, std::vector<std::string>& out) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot read flagfile '{}'", path));
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = Trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    if (FlagName(line).empty()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: '{}' is not a flag (--name=value)", path, number, line));
    }
    out.push_back(line);
  }
  return Status();
}

ArgParts SplitArg(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) return {arg, "", false};
  return {arg.substr(0, eq), arg.substr(eq + 1), true};
}

StatusOr<int> IntArg(const std::string& name, const std::string& value, int min) {
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < min || v > 1000000000) {
    return Status::InvalidArgument(
        fmt::format("--{} needs an integer >= {}, got '{}'", name, min, value));
  }
  return static_cast<int>(v);
}

StatusOr<int64_t> SeedArg(const std::string& name, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < 0) {
    return Status::InvalidArgument(
        fmt::format("--{} needs a seed (an integer >= 0), got '{}'", name, value));
  }
  return static_cast<int64_t>(v);
}

std::string FlagName(const std::string& flag) {
  if (flag.size() < 3 || flag.rfind("--", 0) != 0) return "";
  const size_t eq = flag.find('=');
  return flag.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
}

std::string LastFlagValue(const std::vector<std::string>& flags, const std::string& name) {
  std::string value;
  for (const std::string& f : flags) {
    if (FlagName(f) == name && f.find('=') != std::string::npos) value = f.substr(f.find('=') + 1);
  }
  return value;
}

std::vector<std::string> SavedLaunchArgs(const LaunchArgs& args) {
  std::vector<std::string> saved = {fmt::format("--servers={}", args.servers),
                                    fmt::format("--workers={}", args.workers),
                                    fmt::format("--grace_ms={}", args.grace_ms)};
  if (args.max_restarts > 0)
    saved.push_back(fmt::format("--restart=on-failure:{}", args.max_restarts));
  for (const auto& [rank, factor] : args.slow_workers) {
    saved.push_back(fmt::format("--slow_worker={}:{}", rank, factor));
  }
  if (args.links != "transport") {
    saved.push_back("--links=" + args.links);
    saved.push_back("--netns_subnet=" + args.netns_subnet);
  }
  if (!args.hosts.empty()) {
    saved.push_back("-H=" + HostList(args.hosts));
    saved.push_back(fmt::format("--ssh={}", fmt::join(args.ssh, " ")));
    saved.push_back(fmt::format("--scheduler_port={}", args.scheduler_port));
    if (!args.remote_bin_dir.empty()) saved.push_back("--remote_bin_dir=" + args.remote_bin_dir);
  }
  if (!args.worker_cmd.empty()) {
    saved.push_back(fmt::format("--worker_cmd={}", fmt::join(args.worker_cmd, " ")));
  }
  if (args.workers_per_process > 1) {
    saved.push_back(fmt::format("--workers_per_process={}", args.workers_per_process));
  }
  saved.insert(saved.end(), args.extra_flags.begin(), args.extra_flags.end());
  return saved;
}

namespace {

// --resume=RUN_DIR: the run's saved arguments, then the ones given now (which win).
StatusOr<LaunchArgs> ParseResume(const std::string& dir, const std::vector<std::string>& given) {
  const std::string path = dir + "/launch.args";
  std::ifstream in(path);
  if (!in) {
    return Status::NotFound(
        fmt::format("--resume={}: no {} (only a run folder written by hetps launch can be resumed)",
                    dir, path));
  }
  std::vector<std::string> args;
  for (std::string line; std::getline(in, line);) {
    if (!Trim(line).empty()) args.push_back(Trim(line));
  }
  args.insert(args.end(), given.begin(), given.end());
  auto out = ParseLaunchArgs(args);
  if (!out.ok()) return Status(out.status().code(), path + ": " + out.status().message());
  if (!out->run_dir.empty() && out->run_dir != dir) {
    return Status::InvalidArgument("--resume continues the run in its own folder; drop --run_dir");
  }
  if (!out->hosts.empty()) {
    return Status::FailedPrecondition(
        "--resume of a run on several hosts: its checkpoints are on the scheduler's host, not "
        "here; start it with hetps-scheduler --resume_from and hetps-server --restore_from there");
  }
  out->run_dir = dir;
  out->resume = dir;
  return out;
}

}  // namespace

namespace {

bool IsOwnOption(const std::string& name) {
  static const std::set<std::string> own = {"servers",
                                            "workers",
                                            "flagfile",
                                            "bin_dir",
                                            "grace_ms",
                                            "run_dir",
                                            "slow_worker",
                                            "restart",
                                            "links",
                                            "netns_subnet",
                                            "H",
                                            "hosts",
                                            "ssh",
                                            "scheduler_port",
                                            "remote_bin_dir",
                                            "worker_cmd",
                                            "workers_per_process"};
  return own.contains(name);
}

// The command line's own options into `out` (--links and --netns_subnet, which a flag file may
// set too, into `command_line`, in order), every other flag into `command_line`.
Status ReadOwnOptions(const std::vector<std::string>& args, LaunchArgs& out,
                      std::vector<std::string>& command_line, std::string& flagfile,
                      bool& workers_given) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a == "-H" || a.starts_with("-H=") ? "H" : FlagName(a);
    if (name.empty()) {
      return Status::InvalidArgument(
          fmt::format("unexpected argument '{}' (flags are --name=value)", a));
    }
    if (!IsOwnOption(name)) {
      command_line.push_back(a);
      continue;
    }
    std::string value;
    if (a.find('=') != std::string::npos) {
      value = a.substr(a.find('=') + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Status::InvalidArgument(fmt::format("--{} needs a value", name));
    }
    workers_given |= name == "workers";
    if (name == "flagfile") {
      flagfile = value;
    } else if (name == "links" || name == "netns_subnet") {
      command_line.push_back(fmt::format("--{}={}", name, value));  // after a flagfile's
    } else if (Status s = SetOwnOption(name, value, out); !s.ok()) {
      return s;
    }
  }
  return Status();
}

// A flag file (a scenario) may choose the links: they are this command's to set up, and each
// client in a namespace gets --links=netns from it. Takes them out of out.extra_flags.
Status TakeLinkOptions(LaunchArgs& out) {
  std::vector<std::string> role_flags;
  for (const std::string& f : out.extra_flags) {
    const std::string name = FlagName(f);
    if (name != "links" && name != "netns_subnet") {
      role_flags.push_back(f);
    } else if (Status s = SetOwnOption(name, LastFlagValue({f}, name), out); !s.ok()) {
      return s;
    }
  }
  out.extra_flags = std::move(role_flags);
  return Status();
}

// What the options must hold together; the workers default to the hosts' slots.
Status CheckLaunch(LaunchArgs& out, bool workers_given) {
  for (const std::string& f : out.extra_flags) {
    if (FlagName(f) == "rank") {
      return Status::InvalidArgument("hetps launch gives each worker its rank; drop --rank");
    }
  }
  if (!out.hosts.empty()) {
    if (out.links == "netns") {
      return Status::InvalidArgument(
          "--links=netns emulates links on this machine; with -H/--hosts use --links=transport");
    }
    if (!workers_given) {
      out.workers = 0;
      for (const Host& h : out.hosts) out.workers += h.slots;
    }
  }
  if (out.workers_per_process > 1) {
    if (out.worker_cmd.empty()) {
      return Status::InvalidArgument(
          "--workers_per_process is for --worker_cmd programs that host several ranks "
          "(hetps.fed.main); hetps-worker runs one");
    }
    if (out.links == "netns" || !out.hosts.empty()) {
      return Status::InvalidArgument(
          "--workers_per_process runs ranks in one process on this machine: it cannot go with "
          "--links=netns (a namespace per client) or -H/--hosts");
    }
    if (!out.slow_workers.empty()) {
      return Status::InvalidArgument(
          "--slow_worker slows one process: with --workers_per_process give the scenario's "
          "--slowdown or --device_spread instead");
    }
  }
  for (const auto& [rank, factor] : out.slow_workers) {
    if (rank >= out.workers) {
      return Status::InvalidArgument(
          fmt::format("--slow_worker={}:{}: there are {} workers (ranks 0..{})", rank, factor,
                      out.workers, out.workers - 1));
    }
  }
  return Status();
}

}  // namespace

StatusOr<LaunchArgs> ParseLaunchArgs(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  std::string resume;
  for (size_t i = 0; i < args.size(); ++i) {
    if (FlagName(args[i]) != "resume") {
      rest.push_back(args[i]);
    } else if (args[i].find('=') != std::string::npos) {
      resume = args[i].substr(args[i].find('=') + 1);
    } else if (i + 1 < args.size()) {
      resume = args[++i];
    } else {
      return Status::InvalidArgument("--resume needs a run folder");
    }
  }
  if (!resume.empty()) return ParseResume(resume, rest);
  LaunchArgs out;
  bool workers_given = false;
  std::vector<std::string> command_line;
  std::string flagfile;
  if (Status s = ReadOwnOptions(args, out, command_line, flagfile, workers_given); !s.ok()) {
    return s;
  }
  if (!flagfile.empty()) {
    if (Status s = ReadFlagfile(flagfile, out.extra_flags); !s.ok()) return s;
  }
  // The command line comes after the flagfile, so it wins (gflags keeps the last value).
  out.extra_flags.insert(out.extra_flags.end(), command_line.begin(), command_line.end());
  if (Status s = TakeLinkOptions(out); !s.ok()) return s;
  if (Status s = CheckLaunch(out, workers_given); !s.ok()) return s;
  return out;
}

std::set<std::string> RoleFlagsFromHelpXml(const std::string& xml) {
  static const std::regex flag_re("<flag><file>([^<]*)</file><name>([^<]*)</name>");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), flag_re);
       it != std::sregex_iterator(); ++it) {
    if ((*it)[1].str().find("gflags") != std::string::npos) continue;  // --help and friends
    names.insert((*it)[2].str());
  }
  return names;
}

namespace {

// --data_dir=DIR for the scheduler and the servers: DIR/{i}, unless it names {i} itself (two
// processes on one RocksDB folder would fail on its lock).
std::string OwnFolder(const std::string& flag, const std::string& name, const std::string& role) {
  if (name != "data_dir" || role == "worker" || flag.find("{i}") != std::string::npos) return flag;
  const size_t eq = flag.find('=');
  if (eq == std::string::npos || eq + 1 == flag.size()) return flag;
  std::string dir = flag.substr(eq + 1);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return fmt::format("--data_dir={}/{{i}}", dir);
}

}  // namespace

StatusOr<std::map<std::string, std::vector<std::string>>> RouteFlags(
    const std::vector<std::string>& extra_flags,
    const std::map<std::string, std::set<std::string>>& role_flags) {
  std::map<std::string, std::vector<std::string>> routed;
  for (const auto& [role, names] : role_flags) routed[role];
  for (const std::string& flag : extra_flags) {
    std::string name = FlagName(flag);
    bool known = false;
    for (const auto& [role, names] : role_flags) {
      // "--noverbose" sets bool "verbose" to false.
      const bool match = names.contains(name) ||
                         (name.rfind("no", 0) == 0 && flag.find('=') == std::string::npos &&
                          names.contains(name.substr(2)));
      if (match) {
        routed[role].push_back(OwnFolder(flag, name, role));
        known = true;
      }
    }
    if (!known) {
      return Status::InvalidArgument(fmt::format(
          "unknown flag '{}': no role (scheduler, server, worker, aggregator) defines --{}", flag,
          name));
    }
  }
  return routed;
}

}  // namespace hetps
