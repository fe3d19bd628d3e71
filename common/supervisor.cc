#include "common/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <thread>

#include "common/subprocess.h"

namespace hetps {

using Clock = std::chrono::steady_clock;

bool ChildProcess::succeeded() const {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return "ended";
}

std::string ChildProcess::Describe() const { return status ? DescribeExit(*status) : "running"; }

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Supervisor::~Supervisor() {
  StopAll();
  for (ChildProcess& c : children_) {
    if (c.fd >= 0) close(c.fd);
  }
}

namespace {

void CloseInput(ChildProcess& c) {
  if (c.input_fd >= 0) close(c.input_fd);
  c.input_fd = -1;
}

}  // namespace

StatusOr<ChildProcess*> Supervisor::Start(const std::string& role, const std::string& label,
                                          const std::vector<std::string>& argv,
                                          const std::string& output_file,
                                          bool stop_by_closing_input) {
  SpawnOptions spawn;
  int input[2] = {-1, -1};
  if (stop_by_closing_input) {
    if (pipe2(input, O_CLOEXEC) != 0) {
      return Status::Internal(fmt::format("cannot start {}: pipe: {}", label, strerror(errno)));
    }
    spawn.input_fd = input[0];
  }
  spawn.unblock = options_.unblock;
  spawn.die_with_parent = options_.die_with_parent;
  spawn.search_path = true;
  int fds[2] = {-1, -1};
  if (!output_file.empty()) {
    spawn.output_file = output_file;
    spawn.truncate = true;
  } else if (options_.output == SupervisorOptions::Output::kFile) {
    spawn.output_file = options_.log_file;
  } else if (options_.output == SupervisorOptions::Output::kRelay) {
    if (pipe2(fds, O_CLOEXEC) != 0) {
      return Status::Internal(fmt::format("cannot start {}: pipe: {}", label, strerror(errno)));
    }
    spawn.output_fd = fds[1];
  }
  auto pid = Spawn(argv, spawn);
  if (fds[1] >= 0) close(fds[1]);
  if (input[0] >= 0) close(input[0]);
  if (!pid.ok()) {
    if (fds[0] >= 0) close(fds[0]);
    if (input[1] >= 0) close(input[1]);
    return Status(pid.status().code(),
                  fmt::format("cannot start {}: {}", label, pid.status().message()));
  }
  if (fds[0] >= 0) fcntl(fds[0], F_SETFL, O_NONBLOCK);
  ChildProcess& c = children_.emplace_back();
  c.role = role;
  c.label = label;
  c.pid = *pid;
  c.fd = fds[0];
  c.input_fd = input[1];
  return &c;
}

void Supervisor::Drain(ChildProcess& c, bool eof) {
  char buf[65536];
  ssize_t n;
  while ((n = read(c.fd, buf, sizeof(buf))) > 0) c.partial.append(buf, n);
  size_t start = 0, nl;
  std::string out;
  while ((nl = c.partial.find('\n', start)) != std::string::npos) {
    out += fmt::format("[{}] {}\n", c.label, std::string_view(c.partial).substr(start, nl - start));
    start = nl + 1;
  }
  c.partial.erase(0, start);
  if ((n == 0 || eof) && !c.partial.empty()) {
    out += fmt::format("[{}] {}\n", c.label, c.partial);
    c.partial.clear();
  }
  if (!out.empty()) {
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }
  if (n == 0) {  // the child closed its output
    close(c.fd);
    c.fd = -1;
  }
}

int Supervisor::Reap() {
  int reaped = 0;
  for (ChildProcess& c : children_) {
    if (!c.running()) continue;
    int status;
    if (waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
    if (c.fd >= 0) Drain(c, /*eof=*/true);
    CloseInput(c);
    c.status = status;
    ++reaped;
    if (options_.say && !c.succeeded()) {
      options_.say(fmt::format("{} (pid {}) {}", c.label, c.pid, c.Describe()));
    }
  }
  return reaped;
}

int Supervisor::Pump(int ms) {
  std::vector<pollfd> fds;
  if (options_.signal_fd >= 0) fds.push_back({options_.signal_fd, POLLIN, 0});
  std::vector<ChildProcess*> owners;  // of fds[first_child...]
  for (ChildProcess& c : children_) {
    if (c.fd < 0) continue;
    fds.push_back({c.fd, POLLIN, 0});
    owners.push_back(&c);
  }
  const size_t first_child = options_.signal_fd >= 0 ? 1 : 0;
  // A signalfd that includes SIGCHLD wakes poll when a child exits; without one, look for
  // exits every 10 ms.
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  const int step = options_.signal_fd >= 0 ? ms : std::min(ms, 10);
  int stop = 0;
  while (true) {
    const int ready = poll(fds.data(), fds.size(), step);
    if (ready > 0 && first_child == 1 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo info;
      while (read(options_.signal_fd, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM) {
          stop = static_cast<int>(info.ssi_signo);
        }
      }
    }
    for (size_t i = first_child; ready > 0 && i < fds.size(); ++i) {
      ChildProcess& c = *owners[i - first_child];
      if (c.fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP))) Drain(c, false);
    }
    const int reaped = Reap();
    if (ready != 0 || reaped > 0 || Clock::now() >= deadline) break;
  }
  if (stop != 0) stop_signal_ = stop;
  return stop;
}

std::optional<int> Supervisor::WaitExit(ChildProcess& child, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (child.running() && Clock::now() < deadline) Pump(10);
  return child.status;
}

void Supervisor::StopAll() {
  for (ChildProcess& c : children_) {
    if (!c.running()) continue;
    if (c.input_fd >= 0 && options_.grace_ms > 0) {
      CloseInput(c);
    } else {
      kill(c.pid, options_.grace_ms > 0 ? SIGTERM : SIGKILL);
    }
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.grace_ms);
  while (Running() > 0 && Clock::now() < deadline) Pump(50);
  for (ChildProcess& c : children_) {
    if (!c.running()) continue;
    if (options_.grace_ms > 0 && options_.say) {
      options_.say(fmt::format("{} (pid {}) did not stop in {} ms; killing it", c.label, c.pid,
                               options_.grace_ms));
    }
    kill(c.pid, SIGKILL);
  }
  while (Running() > 0) Pump(50);
}

int Supervisor::Running(const std::string& role) const {
  int n = 0;
  for (const ChildProcess& c : children_) n += c.running() && (role.empty() || c.role == role);
  return n;
}

}  // namespace hetps
