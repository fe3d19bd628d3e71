#include "cli/hosts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <map>
#include <numeric>
#include <regex>

#include "cli/launch_args.h"
#include "common/subprocess.h"
#include "common/supervisor.h"

namespace hetps {
namespace {

// ssh's exit code when it could not connect or lost the connection; timeout's when the time
// ran out; how long a host's check may take.
constexpr int kSshFailed = 255;
constexpr int kTimedOut = 124;
constexpr int kCheckSeconds = 30;

// "host" or "user@host" (a name or an IPv4 address; no option-like or shell-special text).
StatusOr<Host> MakeHost(const std::string& target, const std::string& slots) {
  static const std::regex valid(R"(([A-Za-z0-9._-]+@)?[A-Za-z0-9][A-Za-z0-9._-]*)");
  if (!std::regex_match(target, valid)) {
    return Status::InvalidArgument(fmt::format(
        "'{}' is not a host (a name or IPv4 address, optionally user@; IPv6 literals are not "
        "supported, give a name)",
        target));
  }
  Host host{target, target.substr(target.find('@') + 1), 1};
  if (!slots.empty()) {
    auto n = IntArg("H", slots, 1);
    if (!n.ok()) {
      return Status::InvalidArgument(
          fmt::format("host {}: slots must be an integer >= 1, got '{}'", target, slots));
    }
    host.slots = *n;
  }
  return host;
}

StatusOr<Host> ParseHost(const std::string& entry) {
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos) return MakeHost(entry, "");
  return MakeHost(entry.substr(0, colon), entry.substr(colon + 1));
}

// `argv` as one command line for a POSIX shell, every word quoted.
std::string ShellWords(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) {
    if (!line.empty()) line += ' ';
    line += ShellQuote(a);
  }
  return line;
}

Status CheckOneHost(const std::vector<std::string>& ssh, const Host& host,
                    const std::string& bin_dir) {
  std::vector<std::string> argv = {"sh", "-c",
                                   "for b; do [ -x \"$b\" ] || { echo \"no executable $b\"; exit "
                                   "3; }; done",
                                   "check"};
  for (const char* role : {"scheduler", "server", "worker"}) {
    argv.push_back(fmt::format("{}/hetps-{}", bin_dir, role));
  }
  // Bounded: a host that accepts the connection but never runs the command (a shell startup
  // file that blocks) must not hang the launch before it can be interrupted.
  std::vector<std::string> command = {"timeout", std::to_string(kCheckSeconds)};
  command.insert(command.end(), ssh.begin(), ssh.end());
  command.insert(command.end(), {"-n", "-o", "BatchMode=yes", host.target, "--"});
  command.push_back(ShellWords(argv));
  auto run = RunCaptured(command, /*search_path=*/true);
  if (!run.ok()) return run.status();
  if (run->succeeded()) return Status();
  const std::string said = Trim(run->output);
  if (WIFEXITED(run->status) && WEXITSTATUS(run->status) == kTimedOut) {
    return Status::DeadlineExceeded(fmt::format(
        "{}: no answer in {} s (does a shell startup file there block or take that long?)",
        host.target, kCheckSeconds));
  }
  if (WIFEXITED(run->status) && WEXITSTATUS(run->status) == kSshFailed) {
    return Status::Unavailable(fmt::format("{}: ssh failed: {}", host.target, said));
  }
  return Status::NotFound(fmt::format("{}: {} (install hetps there, or give --remote_bin_dir)",
                                      host.target,
                                      said.empty() ? DescribeExit(run->status) : said));
}

}  // namespace

StatusOr<std::vector<Host>> ParseHostList(const std::string& list) {
  std::vector<Host> hosts;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    auto host = ParseHost(Trim(list.substr(start, comma - start)));
    if (!host.ok()) return Status(host.status().code(), "-H: " + host.status().message());
    hosts.push_back(*host);
    start = comma + 1;
  }
  return hosts;
}

StatusOr<std::vector<Host>> ReadHostsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot read hosts file '{}'", path));
  static const std::regex mpi_style(R"((\S+)\s+slots\s*=\s*(\S+))");
  std::vector<Host> hosts;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    line = Trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::smatch m;
    auto host = std::regex_match(line, m, mpi_style) ? MakeHost(m[1], m[2]) : ParseHost(line);
    if (!host.ok()) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: {}", path, number, host.status().message()));
    }
    hosts.push_back(*host);
  }
  if (hosts.empty()) return Status::InvalidArgument(fmt::format("{}: no hosts", path));
  return hosts;
}

std::string HostList(const std::vector<Host>& hosts) {
  std::vector<std::string> parts;
  for (const Host& h : hosts) parts.push_back(fmt::format("{}:{}", h.target, h.slots));
  return fmt::format("{}", fmt::join(parts, ","));
}

StatusOr<std::vector<int>> WorkerLocalRanks(const std::vector<Host>& hosts, int servers,
                                            int workers) {
  std::vector<int> local(std::max(workers, 0));
  if (hosts.empty()) {
    std::iota(local.begin(), local.end(), 0);
    return local;
  }
  auto p = PlaceOnHosts(hosts, servers, workers);
  if (!p.ok()) return p.status();
  std::map<int, int> next;  // host -> workers placed on it so far
  for (size_t i = 0; i < p->workers.size(); ++i) local[i] = next[p->workers[i]]++;
  return local;
}

namespace {

// "0-3", "5", "0-1 4": a sorted list of indices as ranges.
std::string Ranges(const std::vector<int>& sorted) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    parts.push_back(i == j ? std::to_string(sorted[i])
                           : fmt::format("{}-{}", sorted[i], sorted[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

// The indices i with of[i] == h, in order.
std::vector<int> IndicesOn(const std::vector<int>& of, int h) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(of.size()); ++i) {
    if (of[i] == h) out.push_back(i);
  }
  return out;
}

}  // namespace

std::string PlacedOn(const Placement& p, int h) {
  std::vector<std::string> parts;
  if (p.scheduler == h) parts.push_back("scheduler");
  const std::vector<int> servers = IndicesOn(p.servers, h), workers = IndicesOn(p.workers, h);
  if (!servers.empty()) parts.push_back("servers " + Ranges(servers));
  if (!workers.empty()) parts.push_back("workers " + Ranges(workers));
  return parts.empty() ? "nothing" : fmt::format("{}", fmt::join(parts, ", "));
}

StatusOr<Placement> PlaceOnHosts(const std::vector<Host>& hosts, int servers, int workers) {
  if (hosts.empty()) return Status::InvalidArgument("no hosts");
  Placement p;
  for (int i = 0; i < servers; ++i) p.servers.push_back(i % static_cast<int>(hosts.size()));
  for (int h = 0; h < static_cast<int>(hosts.size()); ++h) {
    for (int s = 0; s < hosts[h].slots && static_cast<int>(p.workers.size()) < workers; ++s) {
      p.workers.push_back(h);
    }
  }
  if (static_cast<int>(p.workers.size()) < workers) {
    return Status::InvalidArgument(
        fmt::format("{} workers but the hosts have {} slots ({}): give more slots (host:slots)",
                    workers, p.workers.size(), HostList(hosts)));
  }
  return p;
}

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::vector<std::string> OverSsh(const std::vector<std::string>& ssh, const Host& host,
                                 const std::vector<std::string>& argv) {
  // fd 3 keeps the session's input for the watchdog, which sends SIGTERM when it ends; the
  // process itself reads /dev/null. The wrapper exits with the process's code.
  static const char kWrapper[] =
      "exec 3<&0 </dev/null; \"$@\" 3<&- & p=$!; "
      "{ cat >/dev/null; kill -TERM $p; } <&3 >/dev/null 2>&1 & w=$!; exec 3<&-; "
      "wait $p; s=$?; kill $w 2>/dev/null; exit $s";
  std::vector<std::string> remote = {"exec", "sh", "-c", kWrapper, "hetps"};
  remote.insert(remote.end(), argv.begin(), argv.end());
  std::vector<std::string> command = ssh;
  command.insert(command.end(), {"-o", "BatchMode=yes", host.target, "--", ShellWords(remote)});
  return command;
}

Status CheckHosts(const std::vector<std::string>& ssh, const std::vector<Host>& hosts,
                  const std::string& bin_dir) {
  std::vector<std::future<Status>> checks;
  for (const Host& host : hosts) {
    checks.push_back(
        std::async(std::launch::async, [&, host] { return CheckOneHost(ssh, host, bin_dir); }));
  }
  std::vector<std::string> failures;
  for (auto& check : checks) {
    Status s = check.get();
    if (!s.ok()) failures.push_back(s.message());
  }
  if (failures.empty()) return Status();
  return Status::Unavailable(fmt::format("{} of {} hosts cannot run hetps: {}", failures.size(),
                                         hosts.size(), fmt::join(failures, "; ")));
}

}  // namespace hetps
