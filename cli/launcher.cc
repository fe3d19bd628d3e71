#include "cli/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/subprocess.h"

namespace hetps {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Child {
  std::string label;  // "server 1"
  std::string role;   // "server"
  pid_t pid = -1;
  int fd = -1;  // its stdout+stderr
  std::string partial;
  std::optional<int> status;  // waitpid status once exited
};

void Say(const std::string& line) {
  std::fprintf(stdout, "[launch] %s\n", line.c_str());
  std::fflush(stdout);
}

std::string Describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return "ended";
}

bool Succeeded(const Child& c) {
  return c.status && WIFEXITED(*c.status) && WEXITSTATUS(*c.status) == 0;
}

// Runs argv (no shell: flags may hold ';' or spaces) and captures its stdout and stderr.
struct Captured {
  int status = -1;  // waitpid status
  std::string output;
};
StatusOr<Captured> RunArgv(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Internal("pipe failed");
  SpawnOptions options;
  options.output_fd = fds[1];
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

class Cluster {
 public:
  Cluster(const LaunchArgs& args, sigset_t signals, int signal_fd)
      : args_(args), signals_(signals), signal_fd_(signal_fd) {}
  ~Cluster() {
    for (Child& c : children_) {
      if (c.fd >= 0) close(c.fd);
    }
  }

  StatusOr<Child*> Spawn(const std::string& role, int index, const std::string& binary,
                         const std::vector<std::string>& flags);
  // Waits up to `ms` for output, signals and exits; returns the stop signal if one arrived.
  int Pump(int ms);
  // SIGTERM to every live child, then SIGKILL after the grace period.
  void StopAll();
  std::vector<Child>& children() { return children_; }
  const std::vector<Child>& children() const { return children_; }

 private:
  void Drain(Child& c, bool eof);
  void Reap();

  const LaunchArgs& args_;
  sigset_t signals_;
  int signal_fd_;
  std::vector<Child> children_;
};

StatusOr<Child*> Cluster::Spawn(const std::string& role, int index, const std::string& binary,
                                const std::vector<std::string>& flags) {
  const std::string label = role == "scheduler" ? role : fmt::format("{} {}", role, index);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Internal(fmt::format("{}: pipe failed", label));
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), flags.begin(), flags.end());
  SpawnOptions options;
  options.output_fd = fds[1];
  options.unblock = &signals_;
  options.die_with_parent = true;  // never outlive the launcher
  auto pid = hetps::Spawn(argv, options);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return Status(pid.status().code(),
                  fmt::format("cannot start {}: {}", label, pid.status().message()));
  }
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Child c;
  c.role = role;
  c.label = label;
  c.pid = *pid;
  c.fd = fds[0];
  children_.push_back(std::move(c));
  return &children_.back();
}

void Cluster::Drain(Child& c, bool eof) {
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

void Cluster::Reap() {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (Child& c : children_) {
      if (c.pid != pid) continue;
      if (c.fd >= 0) Drain(c, /*eof=*/true);
      c.status = status;
      if (!Succeeded(c)) Say(fmt::format("{} (pid {}) {}", c.label, pid, Describe(status)));
    }
  }
}

int Cluster::Pump(int ms) {
  std::vector<pollfd> fds = {{signal_fd_, POLLIN, 0}};
  std::vector<Child*> owners = {nullptr};
  for (Child& c : children_) {
    if (c.fd < 0) continue;
    fds.push_back({c.fd, POLLIN, 0});
    owners.push_back(&c);
  }
  poll(fds.data(), fds.size(), ms);
  int stop = 0;
  if (fds[0].revents & POLLIN) {
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM)
        stop = static_cast<int>(info.ssi_signo);
    }
  }
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents & (POLLIN | POLLHUP)) Drain(*owners[i], false);
  }
  Reap();
  return stop;
}

void Cluster::StopAll() {
  auto live = [&] {
    int n = 0;
    for (Child& c : children_) n += !c.status;
    return n;
  };
  for (Child& c : children_) {
    if (!c.status) kill(c.pid, SIGTERM);
  }
  auto deadline = Clock::now() + std::chrono::milliseconds(args_.grace_ms);
  while (live() > 0 && Clock::now() < deadline) Pump(50);
  for (Child& c : children_) {
    if (!c.status) {
      Say(fmt::format("{} (pid {}) did not stop in {} ms; killing it", c.label, c.pid,
                      args_.grace_ms));
      kill(c.pid, SIGKILL);
    }
  }
  while (live() > 0) Pump(50);
}

// The value of the last "--name=value" in `flags` (gflags keeps the last), or "".
std::string LastFlagValue(const std::vector<std::string>& flags, const std::string& name) {
  std::string value;
  for (const std::string& f : flags) {
    if (FlagName(f) == name && f.find('=') != std::string::npos) value = f.substr(f.find('=') + 1);
  }
  return value;
}

std::string BinDir(const LaunchArgs& args) {
  if (!args.bin_dir.empty()) return args.bin_dir;
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path().string();
}

// Every role's flag names, read from the binaries themselves.
StatusOr<std::map<std::string, std::set<std::string>>> RoleFlags(const std::string& bin_dir) {
  std::map<std::string, std::set<std::string>> flags;
  for (const char* role : {"scheduler", "server", "worker"}) {
    const std::string binary = fmt::format("{}/hetps-{}", bin_dir, role);
    if (access(binary.c_str(), X_OK) != 0) {
      return Status::NotFound(fmt::format("no executable {} (use --bin_dir)", binary));
    }
    auto xml = RunArgv({binary, "--helpxml"});
    if (!xml.ok()) return xml.status();
    flags[role] = RoleFlagsFromHelpXml(xml->output);
  }
  return flags;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every role validates the flags it would be started with (--check_flags) before anything
// starts, so a bad flag fails the launch at once with the role's own message instead of after
// the cluster formed.
Status CheckRoleFlags(const LaunchArgs& args,
                      const std::map<std::string, std::vector<std::string>>& routed,
                      const std::string& bin_dir) {
  const std::map<std::string, std::vector<std::string>> own = {
      {"scheduler",
       {fmt::format("--num_servers={}", args.servers),
        fmt::format("--num_workers={}", args.workers)}},
      {"server", {}},
      {"worker", {"--rank=0"}}};
  for (const auto& [role, flags] : own) {
    std::vector<std::string> argv = {fmt::format("{}/hetps-{}", bin_dir, role), "--check_flags"};
    argv = Concat(Concat(argv, flags), routed.at(role));
    auto run = RunArgv(argv);
    if (!run.ok()) return run.status();
    if (WIFEXITED(run->status) && WEXITSTATUS(run->status) == 0) continue;
    std::string message = run->output;
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return Status::InvalidArgument(fmt::format("{} refuses its flags: {}", role,
                                               message.empty() ? Describe(run->status) : message));
  }
  return Status();
}

// The run's folder (created), with flags.txt: what each role was started with.
StatusOr<std::string> PrepareRunDir(const LaunchArgs& args,
                                    const std::map<std::string, std::vector<std::string>>& routed) {
  std::string dir = args.run_dir;
  if (dir.empty()) {
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    dir = std::string("runs/") + stamp;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::InvalidArgument(fmt::format("cannot create {}: {}", dir, ec.message()));
  dir = fs::absolute(dir).lexically_normal().string();
  std::ofstream flags(dir + "/flags.txt");
  flags << fmt::format("hetps launch --servers {} --workers {}\n", args.servers, args.workers);
  for (const auto& [role, list] : routed)
    flags << fmt::format("{}: {}\n", role, fmt::join(list, " "));
  if (!flags) return Status::InvalidArgument(fmt::format("cannot write {}/flags.txt", dir));
  return dir;
}

// Starts the scheduler and waits for the endpoint it writes; 0 or the launch's exit code.
int StartScheduler(const LaunchArgs& args, Cluster& cluster,
                   const std::map<std::string, std::vector<std::string>>& routed,
                   const std::string& bin_dir, const std::string& endpoint_file,
                   std::string& endpoint) {
  const auto start = Clock::now();
  auto sched =
      cluster.Spawn("scheduler", 0, bin_dir + "/hetps-scheduler",
                    Concat({fmt::format("--num_servers={}", args.servers),
                            fmt::format("--num_workers={}", args.workers),
                            "--bind=tcp://127.0.0.1:*", "--endpoint_file=" + endpoint_file},
                           routed.at("scheduler")));
  if (!sched.ok()) return Say(sched.status().message()), 1;
  while (endpoint.empty()) {
    if (int sig = cluster.Pump(20)) return cluster.StopAll(), 128 + sig;
    if (cluster.children()[0].status) return Say("the scheduler did not start"), 1;
    if (Clock::now() - start > std::chrono::seconds(30)) {
      cluster.StopAll();
      return Say("the scheduler did not report its endpoint in 30 s"), 1;
    }
    std::ifstream in(endpoint_file);
    std::getline(in, endpoint);
  }
  Say(fmt::format("scheduler at {}; starting {} servers and {} workers", endpoint, args.servers,
                  args.workers));
  if (const std::string port = LastFlagValue(routed.at("scheduler"), "http_port");
      !port.empty() && port != "-1") {
    Say(port == "0" ? "status over HTTP on a free port (see the scheduler's log)"
                    : fmt::format("dashboard: http://127.0.0.1:{}/  metrics: /metrics  status: "
                                  "hetps status --scheduler={}",
                                  port, endpoint));
  }
  return 0;
}

// Starts the servers and the workers; a process that cannot start stops them all.
Status StartNodes(const LaunchArgs& args, Cluster& cluster,
                  const std::map<std::string, std::vector<std::string>>& routed,
                  const std::string& bin_dir, const std::string& endpoint,
                  const std::string& run_dir) {
  const std::string sched_flag = "--scheduler=" + endpoint;
  for (int i = 0; i < args.servers; ++i) {
    auto server =
        cluster.Spawn("server", i, bin_dir + "/hetps-server",
                      Concat({sched_flag, "--bind=tcp://127.0.0.1:*"}, routed.at("server")));
    if (!server.ok()) return server.status();
  }
  for (int i = 0; i < args.workers; ++i) {
    std::vector<std::string> flags = {sched_flag, "--run_dir=" + run_dir,
                                      fmt::format("--rank={}", i)};
    if (auto slow = args.slow_workers.find(i); slow != args.slow_workers.end()) {
      flags.push_back(fmt::format("--slowdown={}", slow->second));
      Say(fmt::format("worker {} computes {}x slower (--slow_worker)", i, slow->second));
    }
    auto worker =
        cluster.Spawn("worker", i, bin_dir + "/hetps-worker", Concat(flags, routed.at("worker")));
    if (!worker.ok()) return worker.status();
  }
  return Status();
}

// Runs until every worker has finished and the scheduler and servers have shut down, an
// infrastructure process fails, or a stop signal arrives (its exit code is returned then).
std::optional<int> Supervise(const LaunchArgs& args, Cluster& cluster) {
  std::optional<Clock::time_point> workers_done_at;
  while (true) {
    if (int sig = cluster.Pump(200)) {
      Say(fmt::format("{}: stopping every process", strsignal(sig)));
      cluster.StopAll();
      return 128 + sig;
    }
    int workers_running = 0, infra_running = 0;
    const Child* infra_failed = nullptr;
    for (const Child& c : cluster.children()) {
      const bool worker = c.role == "worker";
      if (!c.status) {
        (worker ? workers_running : infra_running)++;
      } else if (!worker && !Succeeded(c)) {
        infra_failed = &c;
      }
    }
    // The scheduler shuts the servers down only once every worker has left, so a clean exit
    // of theirs while worker processes are still exiting is normal; a failed one is not.
    if (infra_failed != nullptr) {
      Say(fmt::format("{} failed; stopping the cluster", infra_failed->label));
      cluster.StopAll();
      return std::nullopt;
    }
    if (workers_running > 0) continue;
    if (infra_running == 0) return std::nullopt;
    if (!workers_done_at) workers_done_at = Clock::now();
    if (Clock::now() - *workers_done_at > std::chrono::milliseconds(args.grace_ms)) {
      Say("the scheduler and servers did not shut down after the workers finished; stopping them");
      cluster.StopAll();
      return std::nullopt;
    }
  }
}

// 0 when every process succeeded, else 1 naming each that did not.
int Summarize(const Cluster& cluster, Clock::time_point start, const std::string& run_dir) {
  std::vector<std::string> culprits;
  int workers_ok = 0;
  for (const Child& c : cluster.children()) {
    if (Succeeded(c)) {
      workers_ok += c.role == "worker";
    } else {
      culprits.push_back(fmt::format("{} (pid {}) {}", c.label, c.pid, Describe(*c.status)));
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (culprits.empty()) {
    Say(fmt::format("all {} workers finished in {:.1f} s; run folder {}", workers_ok, secs,
                    run_dir));
    return 0;
  }
  Say(fmt::format("failed after {:.1f} s: {}", secs, fmt::join(culprits, "; ")));
  return 1;
}

int Run(const LaunchArgs& args, Cluster& cluster,
        const std::map<std::string, std::vector<std::string>>& routed, const std::string& bin_dir,
        const std::string& endpoint_file, const std::string& run_dir) {
  const auto start = Clock::now();
  std::string endpoint;
  if (int code = StartScheduler(args, cluster, routed, bin_dir, endpoint_file, endpoint)) {
    return code;
  }
  if (Status s = StartNodes(args, cluster, routed, bin_dir, endpoint, run_dir); !s.ok()) {
    Say(s.message());
    cluster.StopAll();
    return 1;
  }
  if (std::optional<int> signalled = Supervise(args, cluster)) return *signalled;
  return Summarize(cluster, start, run_dir);
}

}  // namespace

int Launch(const LaunchArgs& args) {
  const std::string bin_dir = BinDir(args);
  auto role_flags = RoleFlags(bin_dir);
  if (!role_flags.ok()) return Say(role_flags.status().ToString()), 2;
  auto routed = RouteFlags(args.extra_flags, *role_flags);
  if (!routed.ok()) return Say(routed.status().ToString()), 2;
  if (Status s = CheckRoleFlags(args, *routed, bin_dir); !s.ok()) return Say(s.message()), 2;
  auto run_dir = PrepareRunDir(args, *routed);
  if (!run_dir.ok()) return Say(run_dir.status().ToString()), 2;

  char tmpl[] = "/tmp/hetps-launch-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Say("cannot create a temporary directory"), 1;
  const std::string endpoint_file = std::string(tmpl) + "/scheduler.endpoint";

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGCHLD);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  const int signal_fd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  int code;
  {
    Cluster cluster(args, signals, signal_fd);
    code = Run(args, cluster, *routed, bin_dir, endpoint_file, *run_dir);
  }
  close(signal_fd);
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  return code;
}

}  // namespace hetps
