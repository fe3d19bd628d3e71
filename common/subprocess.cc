#include "common/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hetps {

StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& o) {
  // Everything the child needs is prepared before fork: it may only call async-signal-safe
  // functions afterwards.
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const int file_flags = O_WRONLY | O_CREAT | (o.truncate ? O_TRUNC : O_APPEND);
  int exec_fds[2];
  if (pipe2(exec_fds, O_CLOEXEC) != 0) {
    return Status::Internal(fmt::format("{}: pipe: {}", argv[0], std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(exec_fds[0]);
    close(exec_fds[1]);
    return Status::Internal(fmt::format("{}: fork: {}", argv[0], std::strerror(err)));
  }
  if (pid == 0) {
    if (o.input_fd >= 0) dup2(o.input_fd, STDIN_FILENO);
    int out = o.output_fd;
    if (out < 0 && !o.output_file.empty()) out = open(o.output_file.c_str(), file_flags, 0644);
    if (out >= 0) {
      dup2(out, STDOUT_FILENO);
      dup2(out, STDERR_FILENO);
    }
    if (o.unblock != nullptr) sigprocmask(SIG_UNBLOCK, o.unblock, nullptr);
    if (o.die_with_parent) prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (o.search_path) {
      execvp(args[0], args.data());
    } else {
      execv(args[0], args.data());
    }
    const int err = errno;
    (void)!write(exec_fds[1], &err, sizeof(err));
    _exit(127);
  }
  close(exec_fds[1]);
  int err = 0;
  ssize_t got;
  while ((got = read(exec_fds[0], &err, sizeof(err))) < 0 && errno == EINTR) {
  }
  close(exec_fds[0]);
  if (got <= 0) return pid;  // end of file: the exec closed the pipe
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return Status::Internal(fmt::format("{}: {}", argv[0], std::strerror(err)));
}

bool Captured::succeeded() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

StatusOr<Captured> RunCaptured(const std::vector<std::string>& argv, bool search_path) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Internal("pipe failed");
  SpawnOptions options;
  options.output_fd = fds[1];
  options.search_path = search_path;
  auto pid = Spawn(argv, options);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  Captured c;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) c.output.append(buf, n);
  }
  close(fds[0]);
  while (waitpid(*pid, &c.status, 0) < 0 && errno == EINTR) {
  }
  return c;
}

}  // namespace hetps
