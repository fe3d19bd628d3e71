// Starting child processes, for `hetps launch`, `hetps-bench` and the integration tests: fork
// and exec, with the exec's outcome reported back through a close-on-exec pipe, so a program
// that cannot be started is an error here instead of a child that silently exits 127.
//
// Thread-safety: Spawn may be called from any thread; the child only calls async-signal-safe
// functions between fork and exec.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct SpawnOptions {
  int input_fd = -1;                  // the child's stdin; else inherited
  int output_fd = -1;                 // the child's stdout and stderr go here; else:
  std::string output_file;            // ... to this file (created); else they are inherited
  bool truncate = false;              // output_file: start it empty (else append)
  bool search_path = false;           // argv[0] may be a program name found on PATH
  const sigset_t* unblock = nullptr;  // signals the child unblocks (the parent blocks them)
  bool die_with_parent = false;       // the child gets SIGTERM when the parent dies
};

// Starts argv[0] with `argv`; returns its pid once the exec succeeded, or why it did not (the
// message names the program and the error, e.g. "/bin/x: Permission denied").
// REQUIRES: argv is not empty. The caller reaps the child (waitpid).
StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// Runs argv to its end (no shell: arguments may hold ';' or spaces) and captures its stdout and
// stderr together. `search_path`: argv[0] may be a program name found on PATH.
struct Captured {
  int status = -1;  // waitpid status
  std::string output;
  bool succeeded() const;  // exited with 0
};
StatusOr<Captured> RunCaptured(const std::vector<std::string>& argv, bool search_path = false);

}  // namespace hetps
