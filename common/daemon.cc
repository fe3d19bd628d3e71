#include "common/daemon.h"

#include <gflags/gflags.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/env_flags.h"
#include "common/logging.h"

DEFINE_string(log_level, "info", "debug, info, warn, error");
DEFINE_string(auth, "none",
              "none, or curve: every connection CURVE-encrypted and admitted by key "
              "(common/auth.h); needs --keys");
DEFINE_string(keys, "", "--auth=curve: the key folder `hetps keygen --out DIR` made");
DEFINE_string(key, "", "--auth=curve: the key pair to use, <keys>/<key>.key (default: the role's)");
DEFINE_bool(insecure, false,
            "listen on a non-loopback address without --auth=curve (anyone who reaches it can "
            "join the cluster and read and write the model)");
DEFINE_string(log_format, "text",
              "text (time, level, [role id], message) or json (one object per line: time, "
              "level, node, msg), for log collectors");

DECLARE_bool(help);
DECLARE_bool(helpshort);

namespace hetps {
namespace {

// --help and --helpshort: the usage and this project's flags only (not those of the libraries
// linked in), on stdout, exit 0. The other help flags (--helpxml, which hetps launch reads, and
// --helpfull) keep gflags' behaviour.
void ShowHelpIfAsked(const char* program) {
  if (FLAGS_help || FLAGS_helpshort) {
    std::string root = __FILE__;  // <source>/common/daemon.cc: flags defined under <source>/
    root = root.substr(0, root.size() - std::string("common/daemon.cc").size());
    gflags::ShowUsageWithFlagsRestrict(program, root.c_str());
    std::exit(0);
  }
  gflags::HandleCommandLineHelpFlags();
}

}  // namespace

bool StartDaemon(const char* role, const char* usage, int* argc, char*** argv) {
  // Every connection holds a descriptor: take all the process may open (the soft limit is often
  // 1024, the hard one far more), so connections, not descriptors, are what the per-address
  // limit (common/connection_guard.h) and the cluster's size run into.
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &files);
  }
  gflags::SetUsageMessage(usage);
  const EnvironmentFlags env = ApplyEnvironmentFlags(environ);
  gflags::ParseCommandLineNonHelpFlags(argc, argv, true);
  ShowHelpIfAsked(**argv);
  const std::string problem = SetupLogging(role, FLAGS_log_level, FLAGS_log_format);
  if (!problem.empty()) {
    spdlog::error("{}", problem);
    return false;
  }
  if (!env.status.ok()) {
    spdlog::error("{}", env.status.message());
    return false;
  }
  for (const std::string& name : env.unknown) {
    spdlog::warn("{} is set but hetps-{} has no such flag; ignored", name, role);
  }
  if (!env.applied.empty()) {
    std::string names;
    for (const std::string& name : env.applied) names += (names.empty() ? "" : ", ") + name;
    spdlog::debug("flags from the environment: {}", names);
  }
  return true;
}

AuthFlags DaemonAuthFlags() { return AuthFlags{FLAGS_auth, FLAGS_keys, FLAGS_key}; }

StatusOr<Auth> LoadDaemonAuth(KeyRole role) { return LoadAuth(DaemonAuthFlags(), role); }

bool InsecureListening() { return FLAGS_insecure; }

void ReloadAllowListOnHangup(SignalWatcher& signals, const Auth& auth) {
  if (!auth.curve) {
    signals.OnHangup([] { spdlog::info("received SIGHUP: nothing to reload (no --auth=curve)"); });
    return;
  }
  signals.OnHangup([allow = auth.allow]() mutable {  // a copy shares the entries
    auto changed = allow.Reload();
    if (changed.ok()) {
      spdlog::info("received SIGHUP: reloaded the allow-list: {}", *changed);
    } else {
      spdlog::error("received SIGHUP: the allow-list stays as it was: {}",
                    changed.status().message());
    }
  });
}

void NotifyReady(const std::string& status) {
  const int sent = sd_notifyf(0, "READY=1\nSTATUS=%s", status.c_str());
  if (sent < 0) spdlog::warn("cannot tell systemd this node is ready: {}", std::strerror(-sent));
  if (sent > 0) spdlog::debug("told systemd: ready ({})", status);
}

void NotifyStopping() { sd_notify(0, "STOPPING=1"); }

int DaemonExit(const Status& run) {
  NotifyStopping();
  if (run.ok()) return 0;
  spdlog::error("{}", run.ToString());
  return run.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace hetps
