// LocalCluster: a scheduler and S servers on this machine, run by a Supervisor, plus the worker
// processes started later. One way to bring a cluster up, for `hetps launch`, `hetps-bench`
// and the integration tests: start the scheduler, wait for the endpoint it writes, start the
// servers; a process that cannot start or dies first is an error naming it.
//
// Thread-safety: used from one thread, like its Supervisor.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/supervisor.h"

namespace hetps {

struct LocalClusterOptions {
  int servers = 1;
  int workers = 1;
  std::string bin_dir;   // where hetps-scheduler, hetps-server and hetps-worker are
  std::string work_dir;  // an existing folder for the scheduler's endpoint file
  std::vector<std::string> scheduler_flags;  // "{i}" replaced by "scheduler"
  std::vector<std::string> server_flags;     // "{i}" replaced by each server's index
  std::string scheduler_bind = "tcp://127.0.0.1:*";
  // Per server, "{i}" replaced by its index: the endpoint it binds and a command prefix (e.g.
  // "ip netns exec ns{i}" puts each server on its own emulated host).
  std::string server_bind = "tcp://127.0.0.1:*";
  std::string server_exec;
  // The workers' command (hetps launch --worker_cmd); empty: bin_dir/hetps-worker.
  std::vector<std::string> worker_command;
  // Per server index, flags after server_flags (e.g. its own --bind and --advertise).
  std::vector<std::vector<std::string>> server_own_flags;
  // Standby servers (hetps-server --standby, docs/replication.md) started after the servers,
  // with the servers' flags less --data_dir and --restore_from; they are servers() too, after
  // the primaries (index servers.. servers + standbys - 1). The scheduler needs --replicas.
  int standbys = 0;
  // Aggregators (hetps-aggregator, docs/aggregation-tier.md) started after the servers, with
  // these flags ("{i}" its index); the scheduler is told to expect them (--aggregators).
  int aggregators = 0;
  std::vector<std::string> aggregator_flags;
  std::vector<std::vector<std::string>> aggregator_own_flags;  // per index, after the above
  std::chrono::milliseconds start_timeout{30000};              // for the scheduler's endpoint

  // Processes on other hosts (hetps launch -H): `place` turns the command line of a process
  // (role "scheduler", "server", "worker" or "aggregator", its index, -1 for the scheduler) into
  // the one that runs it where it belongs (ssh, see cli/hosts.h) and says where ("@host", appended
  // to its label). Such processes are stopped by closing their input (see Supervisor::Start).
  struct Placed {
    std::vector<std::string> argv;
    std::string where;
  };
  std::function<Placed(const std::string& role, int index, std::vector<std::string> argv)> place;
  // With `place`: the endpoint the scheduler is reached at (it binds scheduler_bind, which
  // must name the port), and a probe that is true once it answers there; no endpoint file
  // (there is no shared file system to read it from).
  std::string scheduler_endpoint;
  std::function<bool()> scheduler_ready;
};

class LocalCluster {
 public:
  LocalCluster(Supervisor& supervisor, LocalClusterOptions options);

  // Starts the scheduler, waits for its endpoint, then starts the servers. Fails naming the
  // process that could not start, or the scheduler if it died or was silent for
  // start_timeout; Aborted when the supervisor saw a stop signal meanwhile.
  Status Start();
  // Starts the scheduler again with the flags it first had (it must have exited, and keep its
  // state in a --data_dir): it binds the endpoint it had and resumes the cluster.
  StatusOr<ChildProcess*> RestartScheduler();
  // Starts one more standby server (the servers' flags, less a data dir, plus --standby; the
  // scheduler needs --replicas), e.g. to back a rank up again after its backup took over, or
  // to add one to a running cluster; it is the last of servers().
  StatusOr<ChildProcess*> StartStandby();
  // Starts one more server with the servers' flags (its index in them), e.g. to grow a cluster
  // whose scheduler has --max_servers; it is the last of servers().
  StatusOr<ChildProcess*> StartServer();
  // Starts server `index` again, with the flags it first had (it must have exited).
  StatusOr<ChildProcess*> RestartServer(int index);
  // Starts a hetps-worker joining this cluster, labelled "worker <index>"; with `output_file`,
  // its output goes there; `exec`: a command prefix (e.g. ip netns exec NS).
  StatusOr<ChildProcess*> StartWorker(int index, const std::vector<std::string>& flags,
                                      const std::string& output_file = "",
                                      const std::vector<std::string>& exec = {});
  // Starts worker `index` again with the flags it first had (it must have exited); it rejoins
  // the running cluster under its --rank.
  StatusOr<ChildProcess*> RestartWorker(int index);

  const std::string& endpoint() const { return endpoint_; }
  int standbys() const { return options_.standbys; }
  // The processes started so far (the scheduler is null until it started).
  ChildProcess* scheduler() { return scheduler_; }
  const std::vector<ChildProcess*>& servers() { return servers_; }
  const std::vector<ChildProcess*>& aggregators() { return aggregators_; }
  Supervisor& supervisor() { return supervisor_; }

 private:
  Supervisor& supervisor_;
  LocalClusterOptions options_;
  std::string endpoint_;
  ChildProcess* scheduler_ = nullptr;
  std::vector<ChildProcess*> servers_;
  std::vector<ChildProcess*> aggregators_;
  // Starts a process through `place` when there is one.
  StatusOr<ChildProcess*> StartPlaced(const std::string& role, int index,
                                      const std::vector<std::string>& argv,
                                      const std::string& output_file = "");
  Status AwaitScheduler();

  std::vector<std::string> scheduler_argv_;  // as given to StartPlaced
  std::vector<std::vector<std::string>> server_argv_;
  std::vector<std::string> standby_argv_;
  std::function<std::vector<std::string>(int)> primary_argv_;  // server i's, not a standby
  struct Started {
    std::vector<std::string> argv;
    std::string output_file;
    ChildProcess* process = nullptr;
  };
  std::map<int, Started> workers_;
};

// The folder of the running executable (where the role binaries are installed beside it).
std::string SelfDir();

}  // namespace hetps
