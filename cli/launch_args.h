// The arguments of `hetps launch`: its own options, and the extra role flags it routes to the
// roles that define them (a flag no role defines is an error, not silently dropped).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/hosts.h"
#include "common/status.h"

namespace hetps {

struct LaunchArgs {
  int servers = 1;
  int workers = 1;
  std::string bin_dir;                   // where the role binaries are; default: beside hetps
  int grace_ms = 10000;                  // how long processes get to exit after a stop
  std::string run_dir;                   // the run's folder; default runs/<timestamp>
  std::vector<std::string> extra_flags;  // "--name=value", flagfile lines first
  std::map<int, double> slow_workers;    // worker rank -> slowdown factor (--slow_worker)
  // --restart=on-failure[:N]: a server that fails is started again, at most N times in all
  // (default 3); 0: never (--restart=no, the default).
  int max_restarts = 0;
  // --resume=RUN_DIR: the run in RUN_DIR again (its launch.args, then the flags given now), from
  // its newest complete whole-run checkpoint.
  std::string resume;
  // --links=transport|netns: where the edge clients' emulated links are applied (see
  // cli/netns_links.h); --netns_subnet: the first two octets of the namespaces' addresses.
  std::string links = "transport";
  std::string netns_subnet = "10.203";
  // -H host:slots,... or --hosts=FILE: the processes run on these hosts over ssh (cli/hosts.h);
  // empty: all on 127.0.0.1. --ssh: the ssh command, split at spaces (e.g. "ssh -p 2222");
  // --scheduler_port: the port the scheduler binds on its host; --remote_bin_dir: where the
  // binaries are on the hosts (default: --bin_dir, i.e. the same path as here).
  std::vector<Host> hosts;
  std::vector<std::string> ssh = {"ssh"};
  int scheduler_port = 7340;
  std::string remote_bin_dir;
  // --worker_cmd=COMMAND: the workers run this command (split at spaces, e.g. "python3
  // examples/pytorch/train_fashion_mnist.py") instead of hetps-worker, given the same flags
  // (--scheduler, --rank, --run_dir and the worker flags) and the environment variables
  // HETPS_SCHEDULER and HETPS_RANK.
  std::vector<std::string> worker_cmd;
  // --workers_per_process=N (with --worker_cmd): each process hosts N consecutive ranks (a
  // client pool, e.g. hetps.fed.main's threads), told by HETPS_RANKS=first-last; it is started
  // with --rank=first. 1: a process per worker.
  int workers_per_process = 1;
};

// What a run's folder keeps to be resumed (launch.args, one per line): the options and flags
// the run was started with, the flagfile expanded.
std::vector<std::string> SavedLaunchArgs(const LaunchArgs& args);

// Parses `--servers S --workers W [--flagfile F] [--bin_dir D] [--grace_ms G] [--run_dir R]
// [--slow_worker=RANK:FACTOR]... [--restart=no|on-failure[:N]] [--resume=RUN_DIR]
// [--links=transport|netns] [--netns_subnet=A.B] [-H host:slots,... | --hosts=FILE]
// [--ssh=COMMAND] [--scheduler_port=P] [--remote_bin_dir=D] [--worker_cmd=COMMAND]
// [--workers_per_process=N] [--flag=value]...`; a slowed
// rank must be < W and its factor >= 1 (the worker's --slowdown). With hosts and no
// --workers, W is their slots.
// (also --servers=S forms). Reads the flagfile: one flag per line, '#' starts a comment.
StatusOr<LaunchArgs> ParseLaunchArgs(const std::vector<std::string>& args);

// Appends the flags of a flagfile (one "--name=value" per line, '#' starts a comment) to `out`.
Status ReadFlagfile(const std::string& path, std::vector<std::string>& out);

// Flag names a role binary defines, read from its --helpxml output (gflags' own flags such as
// --help are left out). `xml` is that output.
std::set<std::string> RoleFlagsFromHelpXml(const std::string& xml);

// An argument split at its first '=': "--name=value" gives ("--name", "value", true), "--name"
// gives ("--name", "", false).
struct ArgParts {
  std::string name;
  std::string value;
  bool has_value = false;
};
ArgParts SplitArg(const std::string& arg);
// The value of argument --`name` as an integer in [min, 1e9]; an error naming it otherwise.
StatusOr<int> IntArg(const std::string& name, const std::string& value, int min);
// The value of argument --`name` as a seed: an integer >= 0; an error naming it otherwise.
StatusOr<int64_t> SeedArg(const std::string& name, const std::string& value);

// `s` without leading and trailing blanks (spaces, tabs, line ends).
std::string Trim(const std::string& s);

// The name of "--name=value", "--name" or "--noname" (bools); empty if not a flag.
std::string FlagName(const std::string& flag);

// The value of the last "--name=value" in `flags` (gflags keeps the last), or "".
std::string LastFlagValue(const std::vector<std::string>& flags, const std::string& name);

// Routes each extra flag to the roles that define it. Fails naming the first flag that no role
// defines. `role_flags` maps role ("scheduler", "server", "worker") to its flag names.
// A folder that each process must own (--data_dir) given without "{i}" (which each process
// replaces by its own name: scheduler, 0, 1, ...) gets "/{i}" added: one folder per process.
StatusOr<std::map<std::string, std::vector<std::string>>> RouteFlags(
    const std::vector<std::string>& extra_flags,
    const std::map<std::string, std::set<std::string>>& role_flags);

}  // namespace hetps
