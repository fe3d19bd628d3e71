// Supervisor: starts child processes and watches them until they exit. It relays or redirects
// their output, reaps them, reports a stop signal arriving on a signalfd, and stops them all
// (SIGTERM, then SIGKILL after a grace period). `hetps launch`, `hetps-bench` and the
// integration tests all run their processes through one Supervisor (see local_cluster.h).
//
// Thread-safety: a Supervisor is used from one thread. Children are reaped by pid only, so other
// children of the same process (e.g. std::system) are left alone.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

// A waitpid status in words: "exited with code 1", "killed by signal 9 (Killed)".
std::string DescribeExit(int status);

// One child process. Owned by its Supervisor; the address stays valid as long as it lives.
struct ChildProcess {
  std::string label;  // "server 1"
  std::string role;   // "server"
  pid_t pid = -1;
  std::optional<int> status;  // the waitpid status once it exited
  int index = -1;             // its index within its role, when it has one ("server 1": 1)
  bool replaced = false;      // it failed and was started again (a restart policy)

  bool running() const { return !status.has_value(); }
  bool succeeded() const;        // exited with code 0
  std::string Describe() const;  // "exited with code 1", "killed by signal 9 (Killed)", "running"

  // The supervisor's side of a relayed output pipe.
  int fd = -1;
  // Started with stop_by_closing_input: the write end of its stdin, which StopAll closes.
  int input_fd = -1;
  std::string partial;  // the last unfinished line
};

struct SupervisorOptions {
  enum class Output {
    kRelay,    // each line printed on the supervisor's stdout as "[label] line"
    kFile,     // appended to `log_file`
    kInherit,  // the supervisor's own stdout and stderr
  };
  Output output = Output::kInherit;
  std::string log_file;  // kFile
  // StopAll sends SIGTERM and waits this long before SIGKILL; 0 kills at once.
  int grace_ms = 5000;
  // Signals the children unblock (a supervisor reading a signalfd blocks them) and the
  // signalfd on which Pump() sees SIGINT and SIGTERM; -1 for none.
  const sigset_t* unblock = nullptr;
  int signal_fd = -1;
  bool die_with_parent = true;  // a child gets SIGTERM if the supervisor dies
  // Where the supervisor reports a child that failed ("server 1 (pid 7) exited with code 1")
  // and one it had to kill; nothing is reported when unset.
  std::function<void(const std::string&)> say;
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor();  // StopAll()
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts argv[0] (found on PATH when it has no '/'); with `output_file` its output goes to
  // that file (created empty) whatever the supervisor's output mode. The error names `label`
  // and why the exec failed. `stop_by_closing_input`: the child's stdin is a pipe the
  // supervisor holds, and StopAll asks it to stop by closing that pipe instead of sending
  // SIGTERM (for a child that stands for a process elsewhere, e.g. ssh running one on another
  // host, whose remote side turns the end of its input into SIGTERM; see cli/hosts.h).
  StatusOr<ChildProcess*> Start(const std::string& role, const std::string& label,
                                const std::vector<std::string>& argv,
                                const std::string& output_file = "",
                                bool stop_by_closing_input = false);

  // Waits up to `ms` for output, exits or a stop signal; relays output and reaps. Returns the
  // stop signal (SIGINT/SIGTERM) if one arrived during this call, else 0.
  int Pump(int ms);
  // The last stop signal Pump saw, or 0.
  int stop_signal() const { return stop_signal_; }

  // The child's waitpid status once it exited within `timeout`, else nullopt.
  std::optional<int> WaitExit(ChildProcess& child, std::chrono::milliseconds timeout);
  // SIGTERM to every running child (or the end of its input, see Start), SIGKILL to those
  // still running after the grace period; returns once all are reaped.
  void StopAll();
  // Children of `role` ("" for any) still running.
  int Running(const std::string& role = "") const;
  const std::deque<ChildProcess>& children() const { return children_; }
  std::deque<ChildProcess>& children() { return children_; }

 private:
  void Drain(ChildProcess& c, bool eof);
  int Reap();  // how many children it reaped

  SupervisorOptions options_;
  std::deque<ChildProcess> children_;  // a deque: addresses stay valid as it grows
  int stop_signal_ = 0;
};

}  // namespace hetps
