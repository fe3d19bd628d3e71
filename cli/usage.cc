#include "cli/usage.h"

#include <fmt/format.h>

#include <memory>

#include "cli/fed.h"

namespace hetps {

namespace {

// "           Presets: a, b, ..." wrapped at 92 columns under the usage's indent.
std::string PresetLines() {
  const std::string indent(11, ' ');
  std::string text, line = indent + "Presets:";
  const std::vector<std::string> names = FedPresetNames();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string word = names[i] + (i + 1 < names.size() ? "," : ".");
    if (line.size() + 1 + word.size() > 92) {
      text += line + "\n";
      line = indent + word;
    } else {
      line += " " + word;
    }
  }
  return text + line + "\n";
}

// `text` with "{presets}" replaced by the presets the fed command knows (cli/fed.cc).
const char* WithPresets(const char* text) {
  static std::vector<std::unique_ptr<std::string>> kept;  // filled once, by Commands()
  std::string t = text;
  if (const size_t at = t.find("{presets}"); at != std::string::npos) {
    t.replace(at, 9, PresetLines());
  }
  kept.push_back(std::make_unique<std::string>(std::move(t)));
  return kept.back()->c_str();
}

}  // namespace

const std::vector<CommandUsage>& Commands() {
  static const std::vector<CommandUsage> commands = [] {
    std::vector<CommandUsage> all = {
        {"launch", "run a whole cluster on this machine or over ssh",
         "usage: hetps launch --servers S --workers W [--flagfile F] [--bin_dir D] [--grace_ms G]\n"
         "                    [--run_dir R] [--slow_worker=RANK:FACTOR ...] [--http_port=P]\n"
         "                    [--restart=no|on-failure[:N]] [--links=transport|netns]\n"
         "                    [--netns_subnet=A.B] [--worker_cmd=COMMAND]\n"
         "                    [--workers_per_process=N] [--any_role_flag=value ...]\n"
         "       hetps launch -H host1:slots,host2:slots,... | --hosts=FILE [--ssh=COMMAND]\n"
         "                    [--scheduler_port=P] [--remote_bin_dir=D] [--servers S]\n"
         "                    [--workers W] [the options and flags above]\n"
         "       hetps launch --resume=RUN_DIR [--any_role_flag=value ...]\n"
         "\n"
         "  launch   run a whole cluster (scheduler, S servers, W workers) on 127.0.0.1 on free\n"
         "           ports. Extra flags go to every role that defines them (see each binary's\n"
         "           --help), e.g. --optimizer=adam:lr=0.001 --iterations=100. The run's\n"
         "           folder (default runs/<timestamp>) gets flags.txt and, from the train\n"
         "           workload, metrics.csv, plot.png and summary.json. --slow_worker=2:3 makes\n"
         "           worker 2 compute 3x slower (repeatable); --http_port=P serves the dashboard,\n"
         "           /metrics and /api/status on http://127.0.0.1:P/. Whole-run checkpoints go to\n"
         "           <run>/checkpoints (--checkpoint_every_clocks=N, or hetps ctl checkpoint);\n"
         "           --resume=RUN_DIR starts a stopped run again from its newest one.\n"
         "           --worker_cmd='python3 train.py' runs that instead of hetps-worker, with the\n"
         "           same flags (--scheduler, --rank, --run_dir, the worker flags) and\n"
         "           HETPS_SCHEDULER, HETPS_RANK, HETPS_LOCAL_RANK (its index on its host: the\n"
         "           GPU it takes), HETPS_AUTH, HETPS_KEYS in its environment\n"
         "           (hetps.Client reads them). --workers_per_process=N: each such process\n"
         "           hosts N consecutive ranks (HETPS_RANKS=first-last; hetps.fed.main runs\n"
         "           them as a pool of federated clients).\n"
         "           --links=netns (root): each worker with an emulated link (--link_*) runs in\n"
         "           its own network namespace, tc tbf limiting its bandwidth and a proxy adding\n"
         "           its delay, so the kernel's TCP carries it; the default shapes the link in\n"
         "           the worker's transport. Namespaces are hetps-<pid>-<rank> on A.B.0.0/16\n"
         "           (--netns_subnet, 10.203) and are removed when the launch ends.\n"
         "           -H/--hosts: the cluster on several hosts over ssh (BatchMode: keys, no\n"
         "           passwords), hetps installed at the same path on each (--remote_bin_dir).\n"
         "           The scheduler runs on the first host at --scheduler_port (7340), server i\n"
         "           on host i mod H, the workers fill each host's slots in order (W defaults to\n"
         "           the slots). A hosts file has one 'host', 'host:slots' or 'host slots=N' per\n"
         "           line. Logs come back as [role index@host]; Ctrl-C stops every process;\n"
         "           each host's files (run folder, data dirs) stay on that host.\n"
         "           Security: a local run makes keys for itself in <run>/keys and every role\n"
         "           authenticates with them, so no other user of this machine can join it or\n"
         "           steer it (hetps status|ctl --run_dir=<run> use them); --insecure runs\n"
         "           without, --auth=curve --keys=DIR with keys of your own. A run across hosts\n"
         "           names its keys (--auth=curve --keys=DIR) or says --insecure.\n"},
        {"ctl",
         "switch the consistency or layer schedule of a running cluster, take a whole-run "
         "checkpoint, export a sparse table, hand a server rank to its backup or drain it, or "
         "move partitions to another server rank",
         "usage: hetps ctl --scheduler=tcp://host:port|--run_dir=RUN [--timeout_ms=T]\n"
         "                 set consistency=SPEC [layer_schedule=SPEC] | checkpoint |\n"
         "                 export --table=NAME --out=DIR [--full] | drain-server --rank=N |\n"
         "                 move --partitions=P[,P...] --to=RANK\n"
         "\n"
         "  ctl set  switch the consistency of a running cluster on every server, e.g.\n"
         "           set consistency=ssp:staleness=4 | set consistency=dssp:lower=2,range=8 |\n"
         "           set consistency=backup:backups=auto | set consistency=bsp\n"
         "           (hetps-server --list shows every controller and its parameters);\n"
         "           set layer_schedule=fixed:deep=4 | adaptive:max=8 | every: the layer-wise\n"
         "           push periods the scheduler hands the workers (hetps-scheduler --list)\n"
         "  ctl checkpoint  a whole-run checkpoint now: the model cut at one clock on every\n"
         "           server, in the scheduler's --checkpoint_dir (hetps launch: "
         "<run>/checkpoints);\n"
         "           hetps launch --resume=RUN_DIR continues from the newest one\n"
         "  ctl export  a sparse table's rows for serving (docs/tables.md): every server writes\n"
         "           its buckets into DIR (a new dir, on the servers' file system) and the\n"
         "           scheduler MANIFEST.json: the rows pushed since the table's previous export\n"
         "           and a tombstone for each key evicted or expired since; --full: every row\n"
         "  ctl drain-server  hand server rank N to its backup (docs/replication.md; a cluster\n"
         "           with --replicas and a standby holding the rank): the primary takes no more\n"
         "           requests, its backups acknowledge all it took, it exits, the backup serves\n"
         "           the rank and the workers resend what waited; returns once it serves.\n"
         "           Without backups, in a cluster with --max_servers: the rank's partitions\n"
         "           move to the other ranks, the rank retires and its server exits\n"
         "           (docs/resharding.md)\n"
         "  ctl move  live re-sharding (docs/resharding.md): the partitions' servers ship them\n"
         "           to rank RANK while serving the rest (their requests wait meanwhile), the\n"
         "           shard map's next epoch places them there and the workers follow it;\n"
         "           returns once they serve from RANK (hetps status shows partitions per rank)\n"
         "\n"
         "  --run_dir=RUN reaches the cluster a local hetps launch runs in RUN: its scheduler's\n"
         "  endpoint and its keys are there. --auth=curve --keys=DIR [--key=NAME] (default:\n"
         "  $HETPS_AUTH, $HETPS_KEYS, $HETPS_KEY; key: operator) reach any cluster that runs\n"
         "  with keys.\n"},
        {"fed", "federated experiments: a scenario under one algorithm or several",
         "usage: hetps fed run --flagfile=SCENARIO [--algorithm=A] [options] [--role_flag=value "
         "...]\n"
         "       hetps fed compare --flagfile=SCENARIO --algorithms=A,B,... [options] [...]\n"
         "\n"
         "  fed      federated experiments (docs/federated.md): runs the\n"
         "           scenario (deploy/edge/*.flags) with each algorithm, one launch after "
         "another,\n"
         "           and writes report.md, summary.json and plot.png. An algorithm is a preset\n"
         "           (below) or a .flags file; NAME+--flag=value adds flags to that run only\n"
         "           (--algorithm=A repeats).\n"
         "           Options (the scenario may set them): --clients (20), --servers (2), --target\n"
         "           (0.80), --parallel (clients training at once, 7), --per_round (uploads per\n"
         "           aggregation, 5), --uploads (applied per run, 200), --eval_uploads (20),\n"
         "           --repeats (runs per algorithm, each with the next --selection_seed; the\n"
         "           report gives means and 95% confidence intervals), --run_dir\n"
         "           (runs/fed-<timestamp>; an interrupted compare resumes there). Other flags\n"
         "           go to each launch: role flags, and --links=netns (root: the clients' links\n"
         "           through network namespaces and the kernel's TCP).\n"
         "           --client_cmd='python3 my_client.py': every client (and the evaluator) runs\n"
         "           that program instead of hetps-worker, given the scenario's flags and its\n"
         "           rank (hetps.fed.main reads them); --clients_per_process=N hosts N clients\n"
         "           per process (a pool: 100 Python clients on a small machine).\n"
         "{presets}"},
        {"experiment", "a grid of training runs with seeds, and its report",
         "usage: hetps experiment run FILE [--repeats=N] [--run_dir=D] [--role_flag=value ...]\n"
         "       hetps experiment report DIR [--target=T]\n"
         "\n"
         "  experiment  a grid of training runs (docs/experiments.md): every\n"
         "           --algorithm of the file (deploy/experiments/*.flags) under every --setting,\n"
         "           with --repeats seeds each (default 3), one `hetps launch` after another, "
         "each\n"
         "           in <run_dir>/<setting>/<algorithm>/seed<S> (default run_dir:\n"
         "           runs/experiment-<name>). Writes results.csv, report.md (means with 95%\n"
         "           confidence intervals) and plots/<setting>.png. Run again, it keeps the\n"
         "           finished runs and does the rest. Options (the file may set them): --servers\n"
         "           (1), --workers (4), --target (0.88), --name. Other flags go to every run.\n"
         "           report DIR writes the report of the runs DIR holds (--target=T: timed\n"
         "           to another accuracy).\n"},
        {"health", "exit 0 when the scheduler answers (a container health check)",
         "usage: hetps health [--scheduler=tcp://host:port|--run_dir=RUN]\n"
         "                    [--role=server|worker --rank=R]\n"
         "                    [--timeout_ms=T]\n"
         "\n"
         "  health   a health check for containers: exit 0 when the scheduler answers (and, with\n"
         "           --role and --rank, counts that node alive), 1 otherwise, saying why.\n"
         "           --scheduler defaults to $HETPS_SCHEDULER.\n"
         "\n"
         "  --run_dir=RUN reaches the cluster a local hetps launch runs in RUN: its scheduler's\n"
         "  endpoint and its keys are there. --auth=curve --keys=DIR [--key=NAME] (default:\n"
         "  $HETPS_AUTH, $HETPS_KEYS, $HETPS_KEY; key: operator) reach any cluster that runs\n"
         "  with keys.\n"},
        {"status", "the cluster in tables (workers, servers, layers), once or like top",
         "usage: hetps status --scheduler=tcp://host:port|--run_dir=RUN [--watch[=SECONDS]]\n"
         "                    [--json]\n"
         "                    [--timeout_ms=T]\n"
         "\n"
         "  status   workers (clock, iteration time, gate wait, staleness, bytes, straggler "
         "flag),\n"
         "           servers and layers in tables; --watch refreshes like top (default every 2 "
         "s).\n"
         "\n"
         "  --run_dir=RUN reaches the cluster a local hetps launch runs in RUN: its scheduler's\n"
         "  endpoint and its keys are there. --auth=curve --keys=DIR [--key=NAME] (default:\n"
         "  $HETPS_AUTH, $HETPS_KEYS, $HETPS_KEY; key: operator) reach any cluster that runs\n"
         "  with keys.\n"},
        {"keygen", "key material for --auth=curve",
         "usage: hetps keygen --out=DIR [--add=ROLE:NAME ...]\n"
         "\n"
         "  keygen   key material for --auth=curve (docs/security.md): a pair per role\n"
         "           (scheduler, server, worker, operator) and DIR/allow, the keys the scheduler\n"
         "           and servers admit; --add=worker:edge-7 adds a per-node pair to DIR.\n"},
    };
    for (CommandUsage& c : all) c.text = WithPresets(c.text);
    return all;
  }();
  return commands;
}

const CommandUsage* FindCommand(const std::string& name) {
  for (const CommandUsage& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

std::string Overview() {
  std::string s =
      "usage: hetps COMMAND [--help] [ARGS...]   (hetps COMMAND --help: that command's usage)\n\n";
  for (const CommandUsage& c : Commands()) s += fmt::format("  {:<11} {}\n", c.name, c.summary);
  s += "\nFlags take --flag=value or --flag value. The daemons (hetps-scheduler, hetps-server,\n"
       "hetps-worker) describe their own flags with --help; docs/flags.md lists them all.\n";
  return s;
}

std::vector<std::string> JoinFlagValues(const std::vector<std::string>& args,
                                        const std::vector<std::string>& value_flags) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool takes_value =
        a.size() > 2 && a.starts_with("--") && a.find('=') == std::string::npos &&
        std::find(value_flags.begin(), value_flags.end(), a.substr(2)) != value_flags.end();
    if (takes_value && i + 1 < args.size()) {
      out.push_back(a + "=" + args[++i]);
    } else {
      out.push_back(a);
    }
  }
  return out;
}

bool AsksForHelp(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h" || a == "-help" || a == "--helpshort") return true;
  }
  return false;
}

}  // namespace hetps
