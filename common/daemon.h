// The start every daemon (hetps-scheduler, hetps-server, hetps-worker) shares: its flags from
// the environment (HETPS_<NAME>, common/env_flags.h) and then from the command line, which
// wins; logging set up from --log_level and --log_format (defined here for all three); and what
// the environment set, or set wrongly, reported.
#pragma once

#include <string>

#include "common/auth.h"
#include "common/signals.h"
#include "common/status.h"

namespace hetps {

// Parses the flags (gflags::ParseCommandLineFlags, removing them from argv) and sets up
// logging as `role`. Returns false, after logging why, when the daemon must exit with 2 (an
// unknown level or format, a HETPS_* value a flag refuses).
bool StartDaemon(const char* role, const char* usage, int* argc, char*** argv);

// After StartDaemon: --auth, --keys and --key as given, and what they give a process of `role`.
AuthFlags DaemonAuthFlags();
StatusOr<Auth> LoadDaemonAuth(KeyRole role);
// --insecure: listening off loopback without authentication is accepted.
bool InsecureListening();
// systemd's readiness protocol (sd_notify; nothing outside a Type=notify unit): READY=1 with
// `status` once the node serves (the scheduler listens; a server or worker has joined), and
// STOPPING=1 when it starts shutting down.
void NotifyReady(const std::string& status);
void NotifyStopping();
// How a listening daemon's run ended, as its exit code: tells systemd it stops, logs an error,
// and returns 0 for OK, 2 for a bad argument (INVALID_ARGUMENT), 1 otherwise.
int DaemonExit(const Status& run);
// A listening daemon's SIGHUP: with --auth=curve, `auth`'s allow-list is read again from its
// file (AllowList::Reload; every copy of it, the ZAP handler's included, sees the new one) and
// what changed is logged, or, for a bad file, why the old list stays.
void ReloadAllowListOnHangup(SignalWatcher& signals, const Auth& auth);

}  // namespace hetps
