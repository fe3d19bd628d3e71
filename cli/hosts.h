// The hosts of `hetps launch -H host:slots,...` (or --hosts=FILE): where each process of a
// cluster spread over several machines runs, and the ssh command line that runs it there.
//
// Every process is started over ssh (also on the launching machine when it is listed), with
// the hetps binaries at the same path on every host and no shared file system. The remote side
// is a small POSIX sh wrapper: it runs the process with its input from /dev/null and turns the
// end of the ssh session's input into SIGTERM for it, so the launcher stops a remote process by
// closing that input (Supervisor::Start, stop_by_closing_input) and gets its own exit code back
// through ssh; if the launcher dies, its ssh clients die with it and the remote processes are
// sent SIGTERM the same way.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace hetps {

struct Host {
  std::string target;   // what ssh is given: "node1", "alice@10.0.0.2"
  std::string address;  // what the other processes dial: the target without "user@"
  int slots = 1;        // how many workers it runs
};

// "-H a:2,b,c:4": comma-separated host[:slots], slots 1 when not given.
StatusOr<std::vector<Host>> ParseHostList(const std::string& list);
// A hosts file: one host per line as "host", "host:slots" or "host slots=N"; '#' starts a
// comment. Errors name the file and line.
StatusOr<std::vector<Host>> ReadHostsFile(const std::string& path);
// The hosts as one -H list again ("a:2,b:1").
std::string HostList(const std::vector<Host>& hosts);

// Host indices: the scheduler on the first host, server i on host i % H, workers filling each
// host's slots in order (ranks 0..slots0-1 on the first host, and so on). More workers than
// slots is an error.
struct Placement {
  int scheduler = 0;
  std::vector<int> servers;
  std::vector<int> workers;
};
StatusOr<Placement> PlaceOnHosts(const std::vector<Host>& hosts, int servers, int workers);
// Each worker's index among the workers on its host (a GPU worker's device is its local rank
// mod the host's GPUs): with hosts, its place among those PlaceOnHosts puts on the same host;
// without (a local launch), its rank.
StatusOr<std::vector<int>> WorkerLocalRanks(const std::vector<Host>& hosts, int servers,
                                            int workers);
// What the placement runs on host h: "scheduler, servers 0-1, workers 0-3 5", or "nothing".
std::string PlacedOn(const Placement& p, int h);

// `text` as one word for a POSIX shell: in single quotes, a quote as '\''.
std::string ShellQuote(const std::string& text);

// The command line that runs `argv` on `host`: `ssh` (the user's ssh command, e.g. {"ssh",
// "-p", "2222"}) with BatchMode (a password prompt would hang the launch), the host, and the
// wrapper described above.
std::vector<std::string> OverSsh(const std::vector<std::string>& ssh, const Host& host,
                                 const std::vector<std::string>& argv);

// Whether every host can be reached over ssh and has hetps-scheduler, hetps-server and
// hetps-worker in `bin_dir`; checked on all hosts at once, each within 30 s. The error names
// each host that fails and why (ssh's own message, the missing binary, or no answer).
Status CheckHosts(const std::vector<std::string>& ssh, const std::vector<Host>& hosts,
                  const std::string& bin_dir);

}  // namespace hetps
