#include "cli/launcher.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/hosts.h"
#include "cli/netns_links.h"
#include "cli/run_aggregators.h"
#include "cli/run_keys.h"
#include "cli/run_replicas.h"
#include "cli/status.h"
#include "cli/usage.h"
#include "common/cut.h"
#include "common/local_cluster.h"
#include "common/subprocess.h"
#include "common/supervisor.h"

namespace hetps {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

void Say(const std::string& line) {
  std::fprintf(stdout, "[launch] %s\n", line.c_str());
  std::fflush(stdout);
}

std::string BinDir(const LaunchArgs& args) {
  if (!args.bin_dir.empty()) return args.bin_dir;
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path().string();
}

// Every role's flag names, read from the binaries themselves. The aggregator is optional (a run
// with --aggregators fails to start it without one).
StatusOr<std::map<std::string, std::set<std::string>>> RoleFlags(const std::string& bin_dir) {
  std::map<std::string, std::set<std::string>> flags;
  for (const char* role : {"scheduler", "server", "worker", "aggregator"}) {
    const std::string binary = fmt::format("{}/hetps-{}", bin_dir, role);
    if (access(binary.c_str(), X_OK) != 0) {
      if (std::string(role) == "aggregator") {  // optional: no flags to route to it
        flags[role];
        continue;
      }
      return Status::NotFound(fmt::format("no executable {} (use --bin_dir)", binary));
    }
    auto xml = RunCaptured({binary, "--helpxml"});
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
      {"worker", {"--rank=0"}},
      {"aggregator", {}}};
  for (const auto& [role, flags] : own) {
    const std::string binary = fmt::format("{}/hetps-{}", bin_dir, role);
    if (role == "aggregator" && access(binary.c_str(), X_OK) != 0) continue;  // optional
    std::vector<std::string> argv = {binary, "--check_flags"};
    argv = Concat(Concat(argv, flags), routed.at(role));
    auto run = RunCaptured(argv);
    if (!run.ok()) return run.status();
    if (WIFEXITED(run->status) && WEXITSTATUS(run->status) == 0) continue;
    std::string message = run->output;
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return Status::InvalidArgument(fmt::format(
        "{} refuses its flags: {}", role, message.empty() ? DescribeExit(run->status) : message));
  }
  return Status();
}

// The run's folder: --run_dir, or runs/<timestamp>; absolute.
std::string RunDirPath(const LaunchArgs& args) {
  std::string dir = args.run_dir;
  if (dir.empty()) {
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    dir = std::string("runs/") + stamp;
  }
  return fs::absolute(dir).lexically_normal().string();
}

// Creates the run's folder with flags.txt (what each role was started with) and launch.args
// (what --resume starts it with again).
Status PrepareRunDir(const LaunchArgs& args, const std::string& dir,
                     const std::map<std::string, std::vector<std::string>>& routed) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::InvalidArgument(fmt::format("cannot create {}: {}", dir, ec.message()));
  std::ofstream flags(dir + "/flags.txt");
  flags << fmt::format("hetps launch --servers {} --workers {}\n", args.servers, args.workers);
  for (const auto& [role, list] : routed)
    flags << fmt::format("{}: {}\n", role, fmt::join(list, " "));
  std::ofstream saved(dir + "/launch.args");
  for (const std::string& a : SavedLaunchArgs(args)) saved << a << "\n";
  if (!flags || !saved) return Status::InvalidArgument(fmt::format("cannot write {}", dir));
  return Status();
}

// Whole-run checkpoints go to <run>/checkpoints unless the flags say where; --resume starts the
// scheduler and the servers from the newest complete one. Federated rounds are logged to
// <run>/rounds.csv.
Status SetUpCheckpoints(const LaunchArgs& args, const std::string& run_dir,
                        std::map<std::string, std::vector<std::string>>& routed) {
  std::vector<std::string>& scheduler = routed.at("scheduler");
  if (LastFlagValue(scheduler, "rounds_csv").empty()) {  // federated rounds, when there are any
    scheduler.insert(scheduler.begin(), "--rounds_csv=" + run_dir + "/rounds.csv");
  }
  std::string dir = LastFlagValue(scheduler, "checkpoint_dir");
  if (dir.empty()) {
    dir = run_dir + "/checkpoints";
    scheduler.insert(scheduler.begin(), "--checkpoint_dir=" + dir);
  }
  if (args.resume.empty()) return Status();
  auto cut = LatestCut(dir);
  if (!cut.ok()) {
    return Status::NotFound(fmt::format(
        "cannot resume {}: {} (take checkpoints with --checkpoint_every_clocks=N or hetps ctl "
        "checkpoint)",
        run_dir, cut.status().message()));
  }
  auto manifest = ReadManifest(*cut);
  if (!manifest.ok()) return manifest.status();
  scheduler.push_back("--resume_from=" + *cut);
  routed.at("server").push_back("--restore_from=" + *cut);
  Say(fmt::format("resuming {} from its checkpoint at clock {} ({}, written {})", run_dir,
                  manifest->clock(), *cut, manifest->written_at()));
  return Status();
}

// Tells where the dashboard is when the scheduler serves HTTP, and how to ask for the status.
// `scheduler_host`: the host the scheduler runs on (-H), empty when it runs here.
void SayDashboard(const std::vector<std::string>& scheduler_flags, const std::string& run_dir,
                  const std::string& scheduler_host) {
  std::string status = "hetps status --run_dir=" + run_dir;  // its endpoint and its own keys
  if (const std::string keys = LastFlagValue(scheduler_flags, "keys");
      LastFlagValue(scheduler_flags, "auth") == "curve" && !keys.empty() &&
      keys != RunKeysDir(run_dir)) {
    status += " --auth=curve --keys=" + keys;  // the operator key of the run's keys
  }
  const std::string port = LastFlagValue(scheduler_flags, "http_port");
  if (port.empty() || port == "-1") {
    Say("status: " + status);
    return;
  }
  if (port == "0") {
    Say("status over HTTP on a free port (see the scheduler's log); status: " + status);
    return;
  }
  std::string where = "127.0.0.1", note;
  if (!scheduler_host.empty()) {
    const std::string bound = LastFlagValue(scheduler_flags, "http_host");
    if (bound == "0.0.0.0") {
      where = scheduler_host;
    } else if (!bound.empty() && bound != "127.0.0.1") {
      where = bound;
    } else {
      note =
          fmt::format(" (on {}; --http_host=0.0.0.0 serves it to other machines)", scheduler_host);
    }
  }
  Say(fmt::format("dashboard: http://{}:{}/{}  metrics: /metrics  status: {}", where, port, note,
                  status));
}

// --links=netns: the clients in network namespaces, the cluster's ports behind the proxy.
struct Netns {
  std::unique_ptr<NetnsLinks> links;
  std::set<int> ranks;  // the workers in namespaces
  int scheduler_port = 0;
};

// --worker_cmd with the hetps Python package on PYTHONPATH: the build tree's (bin/../python) or
// the installed one (bin/../lib/python3/dist-packages), before what the environment has.
std::vector<std::string> WorkerCommand(const std::vector<std::string>& command,
                                       const std::string& bin_dir) {
  if (command.empty()) return command;
  std::string path;
  for (const char* dir : {"/../python", "/../lib/python3/dist-packages"}) {
    if (std::filesystem::exists(bin_dir + dir + "/hetps/__init__.py")) {
      path = std::filesystem::weakly_canonical(bin_dir + dir).string();
      break;
    }
  }
  if (path.empty()) return command;
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) path += std::string(":") + old;
  std::vector<std::string> argv = {"env", "PYTHONPATH=" + path};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

// Starts the workers, one per rank (or --workers_per_process ranks per --worker_cmd process,
// labelled by its first rank); a process that cannot start is an error. A worker in a namespace
// dials the scheduler through the proxy.
Status StartWorkers(const LaunchArgs& args, LocalCluster& cluster,
                    const std::vector<std::string>& worker_flags, const std::string& run_dir,
                    const Netns& netns) {
  // Each worker's index on its host, the GPU it takes there: hetps-worker gets --local_rank,
  // --worker_cmd programs $HETPS_LOCAL_RANK.
  auto local = WorkerLocalRanks(args.hosts, args.servers, args.workers);
  if (!local.ok()) return local.status();
  for (int i = 0; i < args.workers; i += args.workers_per_process) {
    std::vector<std::string> flags = {"--run_dir=" + run_dir, fmt::format("--rank={}", i)};
    if (auto slow = args.slow_workers.find(i); slow != args.slow_workers.end()) {
      flags.push_back(fmt::format("--slowdown={}", slow->second));
      Say(fmt::format("worker {} computes {}x slower (--slow_worker)", i, slow->second));
    }
    std::vector<std::string> exec, placed;
    if (netns.ranks.count(i) > 0) {
      exec = netns.links->Exec(i);
      placed = {
          fmt::format("--scheduler=tcp://{}:{}", netns.links->address(), netns.scheduler_port),
          "--links=netns"};
    }
    if (args.worker_cmd.empty()) {
      flags.push_back(fmt::format("--local_rank={}", (*local)[i]));
    } else {  // a command of the user's: hetps.Client reads these
      exec.insert(exec.end(), {"env", fmt::format("HETPS_RANK={}", i),
                               fmt::format("HETPS_LOCAL_RANK={}", (*local)[i])});
      if (args.workers_per_process > 1) {
        const int last = std::min(args.workers, i + args.workers_per_process) - 1;
        exec.push_back(fmt::format("HETPS_RANKS={}-{}", i, last));
      }
      for (auto [flag, variable] : {std::pair{"auth", "HETPS_AUTH"}, {"keys", "HETPS_KEYS"}}) {
        const std::string value = LastFlagValue(worker_flags, flag);
        if (!value.empty()) exec.push_back(fmt::format("{}={}", variable, value));
      }
    }
    auto worker = cluster.StartWorker(i, Concat(Concat(flags, worker_flags), placed), "", exec);
    if (!worker.ok()) return worker.status();
  }
  return Status();
}

// --restart: a failed server is started again on its data dir, a failed worker under its rank
// (it rejoins the running cluster), the scheduler on its data dir (it resumes the cluster),
// while the budget lasts; true when it was.
bool MaybeRestart(const LaunchArgs& args, LocalCluster& cluster, ChildProcess& c, int& restarts) {
  const bool scheduler = c.role == "scheduler";
  if (restarts >= args.max_restarts || (!scheduler && c.index < 0) ||
      (!scheduler && (cluster.scheduler() == nullptr || !cluster.scheduler()->running()))) {
    return false;
  }
  ++restarts;
  Say(fmt::format("{} (pid {}) {}; restarting it ({} of {} restarts)", c.label, c.pid, c.Describe(),
                  restarts, args.max_restarts));
  c.replaced = true;
  auto again = scheduler            ? cluster.RestartScheduler()
               : c.role == "server" ? cluster.RestartServer(c.index)
                                    : cluster.RestartWorker(c.index);
  if (!again.ok()) {
    Say(again.status().message());
    return false;
  }
  return true;
}

// Runs until every worker has finished and the scheduler and servers have shut down, or an
// infrastructure process fails (and is not restarted); a stop signal stops everything and is
// returned.
std::optional<int> Supervise(const LaunchArgs& args, LocalCluster& cluster, int& restarts) {
  Supervisor& supervisor = cluster.supervisor();
  std::optional<Clock::time_point> workers_done_at;
  while (true) {
    if (int sig = supervisor.Pump(200)) {
      Say(fmt::format("{}: stopping every process", strsignal(sig)));
      supervisor.StopAll();
      return sig;
    }
    // The scheduler shuts the servers down only once every worker has left, so a clean exit
    // of theirs while worker processes are still exiting is normal; a failed one is not.
    for (ChildProcess& c : supervisor.children()) {
      if (c.running() || c.succeeded() || c.replaced) continue;
      if (c.role == "worker") {
        if (args.max_restarts > 0 && MaybeRestart(args, cluster, c, restarts)) break;
        continue;  // the run goes on without it; the summary names it
      }
      if (supervisor.Running("worker") > 0 && MaybeRestart(args, cluster, c, restarts)) break;
      if (c.role == "server" && cluster.standbys() > 0 && supervisor.Running("server") > 0) {
        // --replicas: its rank goes to a standby (if it was a standby, its primary goes on).
        Say(fmt::format("{} {}; the rank fails over to a standby", c.label, c.Describe()));
        c.replaced = true;
        continue;
      }
      Say(fmt::format("{} failed; stopping the cluster", c.label));
      supervisor.StopAll();
      return std::nullopt;
    }
    if (supervisor.Running("worker") > 0) continue;
    if (supervisor.Running() == 0) return std::nullopt;
    if (!workers_done_at) workers_done_at = Clock::now();
    if (Clock::now() - *workers_done_at > std::chrono::milliseconds(args.grace_ms)) {
      Say("the scheduler and servers did not shut down after the workers finished; stopping them");
      supervisor.StopAll();
      return std::nullopt;
    }
  }
}

// 0 when every process succeeded (a restarted one counts as its restart), else 1 naming each
// that did not.
int Summarize(const Supervisor& supervisor, Clock::time_point start, const std::string& run_dir,
              int restarts) {
  std::vector<std::string> culprits;
  int workers_ok = 0;
  for (const ChildProcess& c : supervisor.children()) {
    if (c.replaced) continue;
    if (c.succeeded()) {
      workers_ok += c.role == "worker";
    } else {
      culprits.push_back(fmt::format("{} (pid {}) {}", c.label, c.pid, c.Describe()));
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (culprits.empty()) {
    Say(fmt::format("all {} workers finished in {:.1f} s{}; run folder {}", workers_ok, secs,
                    restarts > 0 ? fmt::format(" ({} restarts)", restarts) : "", run_dir));
    return 0;
  }
  Say(fmt::format("failed after {:.1f} s: {}", secs, fmt::join(culprits, "; ")));
  return 1;
}

// --links=netns: each worker with an emulated link (what hetps-worker --print_links says for
// these flags) in its own namespace; the scheduler and the servers on 127.0.0.1 behind the
// proxy's ports.
Status SetUpNetns(const LaunchArgs& args, const std::string& bin_dir,
                  const std::vector<std::string>& worker_flags, LocalClusterOptions& cluster,
                  Netns& netns) {
  std::vector<std::string> argv = {bin_dir + "/hetps-worker", "--rank=0",
                                   fmt::format("--print_links={}", args.workers)};
  auto printed = RunCaptured(Concat(argv, worker_flags));
  if (!printed.ok()) return printed.status();
  if (!printed->succeeded()) {
    return Status::InvalidArgument("hetps-worker --print_links failed: " + printed->output);
  }
  std::vector<NetnsClient> clients;
  std::istringstream lines(printed->output);
  for (std::string line; std::getline(lines, line);) {
    NetnsClient c;
    unsigned long long seed = 0;
    if (std::sscanf(line.c_str(), "%d %lf %lf %lf %lf %lf %lf %llu", &c.rank, &c.link.up_mbps,
                    &c.link.down_mbps, &c.link.latency_ms, &c.link.jitter_ms, &c.link.loss,
                    &c.link.rto_ms, &seed) != 8) {
      continue;  // a log line
    }
    c.link.seed = seed;
    if (!c.link.enabled()) continue;  // an evaluator, or a worker without an emulated link
    clients.push_back(c);
    netns.ranks.insert(c.rank);
  }
  if (clients.empty()) {
    return Status::InvalidArgument(
        "--links=netns: no worker has an emulated link (give --link_up_mbps, --link_down_mbps, "
        "--link_latency_ms... or --link_table)");
  }
  auto links = NetnsLinks::Create(clients, args.netns_subnet);
  if (!links.ok()) return links.status();
  netns.links = std::move(*links);
  auto port = netns.links->Forward(/*delay=*/false);
  if (!port.ok()) return port.status();
  netns.scheduler_port = *port;
  cluster.scheduler_bind = fmt::format("tcp://127.0.0.1:{}", *port);
  for (int i = 0; i < args.servers; ++i) {
    port = netns.links->Forward(/*delay=*/true);
    if (!port.ok()) return port.status();
    cluster.server_own_flags.push_back(
        {fmt::format("--bind=tcp://127.0.0.1:{}", *port),
         fmt::format("--advertise=tcp://{}:{}", netns.links->address(), *port)});
  }
  if (Status s = netns.links->StartProxy(); !s.ok()) return s;
  Say(fmt::format(
      "--links=netns: {} clients in network namespaces hetps-{}-<rank> on a bridge at {}; tc tbf "
      "limits their bandwidth, a proxy adds their latency, jitter and losses",
      clients.size(), getpid(), netns.links->address()));
  return Status();
}

// -H/--hosts: every process runs on its host over ssh (cli/hosts.h). The scheduler binds
// --scheduler_port on every interface of the first host and is dialled at that host's address;
// each server binds a free port and advertises its host's address with it. Returns the
// scheduler's host.
StatusOr<std::string> SetUpHosts(const LaunchArgs& args, const std::string& bin_dir,
                                 LocalClusterOptions& cluster) {
  auto placement = PlaceOnHosts(args.hosts, args.servers, args.workers);
  if (!placement.ok()) return placement.status();
  // The scheduler and servers listen on the hosts' network: say what secures it before any
  // host is touched (each of them would refuse to start anyway).
  bool secured = false;
  for (const char* env : {"HETPS_AUTH", "HETPS_INSECURE"}) {
    const char* v = std::getenv(env);
    if (v != nullptr &&
        (std::string(v) == "curve" || std::string(v) == "true" || std::string(v) == "1")) {
      secured = true;
    }
  }
  for (const std::string& f : args.extra_flags) {
    if (f == "--auth=curve" || f == "--insecure" || f == "--insecure=true") secured = true;
  }
  if (!secured) {
    return Status::InvalidArgument(
        "a cluster across hosts listens on their network: run it with --auth=curve --keys=DIR "
        "(hetps keygen --out=DIR, the folder at that path on every host), or pass --insecure on "
        "a network where everyone who can reach the hosts may join the cluster and read and "
        "write the model");
  }
  const std::string remote_bin = args.remote_bin_dir.empty() ? bin_dir : args.remote_bin_dir;
  Say(fmt::format("checking {} hosts over ssh ({}): reachable, hetps in {}", args.hosts.size(),
                  HostList(args.hosts), remote_bin));
  if (Status s = CheckHosts(args.ssh, args.hosts, remote_bin); !s.ok()) return s;
  const Placement& p = *placement;
  const Host& scheduler = args.hosts[p.scheduler];
  cluster.bin_dir = remote_bin;
  cluster.scheduler_bind = fmt::format("tcp://*:{}", args.scheduler_port);
  cluster.scheduler_endpoint = fmt::format("tcp://{}:{}", scheduler.address, args.scheduler_port);
  // Probed as an operator with the run's keys when it runs with --auth=curve.
  OperatorAuth probe = OperatorAuth::FromEnvironment();
  for (const std::string& f : args.extra_flags) {
    if (f.starts_with("--auth=") || f.starts_with("--keys=")) probe.TakeArg(f);
  }
  cluster.scheduler_ready = [endpoint = cluster.scheduler_endpoint, probe] {
    return FetchStatus(endpoint, probe, 500).ok();
  };
  cluster.server_bind = "tcp://*:*";
  for (int i = 0; i < args.servers; ++i) {
    cluster.server_own_flags.push_back(
        {fmt::format("--advertise=tcp://{}:*", args.hosts[p.servers[i]].address)});
  }
  cluster.place = [hosts = args.hosts, ssh = args.ssh, p](const std::string& role, int index,
                                                          std::vector<std::string> argv) {
    const int h = role == "scheduler"    ? p.scheduler
                  : role == "server"     ? p.servers.at(index)
                  : role == "aggregator" ? AggregatorHost(p, index)
                                         : p.workers.at(index);
    return LocalClusterOptions::Placed{OverSsh(ssh, hosts[h], argv), "@" + hosts[h].target};
  };
  for (int h = 0; h < static_cast<int>(args.hosts.size()); ++h) {
    Say(fmt::format("{}: {}", args.hosts[h].target, PlacedOn(p, h)));
  }
  return scheduler.target;
}

// Brings the cluster up, supervises it and returns the launch's exit code.
// `scheduler_host`: where the scheduler runs (-H), empty when here.
int Run(const LaunchArgs& args, Supervisor& supervisor, const LocalClusterOptions& options,
        const std::vector<std::string>& worker_flags, const std::string& run_dir,
        const Netns& netns, const std::string& scheduler_host) {
  const auto start = Clock::now();
  LocalCluster cluster(supervisor, options);
  Status s = cluster.Start();
  if (s.ok()) {
    Say(fmt::format("scheduler at {}; starting {} servers and {} workers", cluster.endpoint(),
                    args.servers, args.workers));
    std::ofstream endpoint(RunEndpointFile(run_dir));  // for hetps status|ctl --run_dir
    endpoint << cluster.endpoint() << "\n";
    if (!endpoint.flush()) Say("cannot write " + RunEndpointFile(run_dir));
    SayDashboard(options.scheduler_flags, run_dir, scheduler_host);
    s = StartWorkers(args, cluster, worker_flags, run_dir, netns);
  }
  if (!s.ok()) {
    if (supervisor.stop_signal() == 0) Say(s.message());
    supervisor.StopAll();
    return supervisor.stop_signal() != 0 ? 128 + supervisor.stop_signal() : 1;
  }
  int restarts = 0;
  if (std::optional<int> signalled = Supervise(args, cluster, restarts)) return 128 + *signalled;
  return Summarize(supervisor, start, run_dir, restarts);
}

}  // namespace

int Launch(const LaunchArgs& args) {
  const std::string bin_dir = BinDir(args);
  auto role_flags = RoleFlags(bin_dir);
  if (!role_flags.ok()) return Say(role_flags.status().ToString()), 2;
  auto routed = RouteFlags(args.extra_flags, *role_flags);
  if (!routed.ok()) {  // a wrong argument: the error, then launch's usage
    Say(routed.status().ToString());
    std::fprintf(stderr, "\n%s", FindCommand("launch")->text);
    return 2;
  }
  if (args.max_restarts > 0) {
    // A restarted server must find its shards, and the workers must wait for it.
    if (LastFlagValue(routed->at("server"), "data_dir").empty()) {
      return Say("--restart needs servers that keep their shards: add --data_dir=DIR/{i}"), 2;
    }
    if (LastFlagValue(routed->at("worker"), "server_recovery_timeout_ms").empty()) {
      routed->at("worker").insert(routed->at("worker").begin(),
                                  "--server_recovery_timeout_ms=60000");
    }
  }
  auto standbys = SetUpReplicas(args, *routed);
  if (!standbys.ok()) return Say(standbys.status().message()), 2;
  if (*standbys > 0) {
    Say(fmt::format("{} standby server(s) per rank back the {} servers up",
                    *standbys / args.servers, args.servers));
  }
  const std::string run_dir = RunDirPath(args);
  if (Status s = SetUpCheckpoints(args, run_dir, *routed); !s.ok()) return Say(s.message()), 2;
  auto secured = SecureLocalRun(args, run_dir, *routed);
  if (!secured.ok()) return Say(secured.status().message()), 2;
  if (!secured->empty()) Say(*secured);
  if (Status s = CheckRoleFlags(args, *routed, bin_dir); !s.ok()) return Say(s.message()), 2;
  if (Status s = PrepareRunDir(args, run_dir, *routed); !s.ok()) return Say(s.ToString()), 2;

  char tmpl[] = "/tmp/hetps-launch-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Say("cannot create a temporary directory"), 1;

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGCHLD);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  const int signal_fd = signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  int code;
  Netns netns;  // outlives every process it holds
  {
    SupervisorOptions supervision;
    supervision.output = SupervisorOptions::Output::kRelay;
    supervision.grace_ms = args.grace_ms;
    supervision.unblock = &signals;
    supervision.signal_fd = signal_fd;
    supervision.say = Say;
    Supervisor supervisor(supervision);
    LocalClusterOptions cluster;
    cluster.servers = args.servers;
    cluster.workers = args.workers;
    cluster.bin_dir = bin_dir;
    cluster.worker_command = WorkerCommand(args.worker_cmd, bin_dir);
    cluster.work_dir = tmpl;
    cluster.scheduler_flags = routed->at("scheduler");
    cluster.server_flags = routed->at("server");
    cluster.standbys = *standbys;
    auto aggregators = SetUpAggregators(args, *routed, cluster);
    Status placed = aggregators.status();
    if (aggregators.ok() && *aggregators > 0) Say(fmt::format("{} aggregator(s)", *aggregators));
    std::string scheduler_host;
    if (placed.ok() && args.links == "netns") {
      placed = SetUpNetns(args, bin_dir, routed->at("worker"), cluster, netns);
    } else if (placed.ok() && !args.hosts.empty()) {
      auto host = SetUpHosts(args, bin_dir, cluster);
      placed = host.status();
      if (host.ok()) scheduler_host = *host;
    }
    if (placed.ok()) {
      code = Run(args, supervisor, cluster, routed->at("worker"), run_dir, netns, scheduler_host);
      if (code == 0 && !args.hosts.empty()) {
        Say(fmt::format("the workers' run files are in {} on their hosts (worker 0: {})", run_dir,
                        args.hosts[0].target));
      }
    } else {
      Say(placed.message());
      code = 2;
    }
  }
  netns.links.reset();
  close(signal_fd);
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  return code;
}

}  // namespace hetps
