#include "cli/fed.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string_view>

#include "cli/fed_report.h"
#include "cli/launch_args.h"
#include "cli/run_series.h"
#include "common/privacy.h"

namespace hetps {
namespace {

namespace fs = std::filesystem;

// An algorithm preset: the servers' and scheduler's flags. {P}: clients training at once, {K}:
// uploads per aggregation, {O}: P / K (fedavg's over-commitment), {D}: the first deep layer of
// the model (layer-wise uploads). `grouped`: an aggregation takes K uploads, so the run's
// budget of uploads is uploads / K aggregations.
struct Preset {
  const char* name;
  bool grouped;
  const char* flags;
};

constexpr char kRounds[] =
    "--consistency=selected --aggregator=fedavg --optimizer=sgd:lr=1 --clients_per_round={K} "
    "--overcommit={O}";
// {A}: the preset's name, the aggregator.
constexpr char kRobust[] =
    "--consistency=selected --aggregator={A} --optimizer=sgd:lr=1 --clients_per_round={K} "
    "--overcommit={O}";
constexpr char kFedSa[] =
    "--consistency=committed:exponent=1 --aggregator=sum --optimizer=sgd:lr=0.5 "
    "--concurrency={P}";

const std::vector<Preset>& Presets() {
  static const std::vector<Preset> presets = {
      // FedAvg (McMahan et al. 2017): sampled rounds, P selected, the first K uploads kept.
      {"fedavg", true, kRounds},
      // FedProx (Li et al. 2020): FedAvg with the proximal term in local training.
      {"fedprox", true, "{R} --prox_mu=0.01"},
      // FedLesScan (Elzohairy et al. 2022): FedAvg rounds with its selection policy, results
      // up to 2 rounds late accepted with the staleness weight (ALGORITHMS.md §7).
      {"fedlesscan", true, "{R} --selection=fedlesscan --late_rounds=2"},
      // Layer-wise uploads with the temporally weighted aggregation (Chen, Sun, Jin 2019).
      {"temporal", true,
       "--consistency=selected --aggregator=temporal --clients_per_round={K} --overcommit={O} "
       "--deep_from={D}"},
      // FedAsync (Xie et al. 2019): each upload mixed in on arrival with its staleness.
      {"fedasync", false,
       "--consistency=committed --aggregator=fedasync:alpha=0.6 --concurrency={P}"},
      // FedBuff (Nguyen et al. 2022): one server step per K uploads.
      {"fedbuff", false,
       "--consistency=committed --aggregator=fedbuff:k={K} --optimizer=sgd:lr=1 "
       "--concurrency={P}"},
      // FedSA (Ma et al. 2021): groups of K uploads weighted by staleness; fedsa-auto picks K.
      {"fedsa", true, "{S} --quorum={K}"},
      {"fedsa-auto", true, "{S} --quorum=0"},
      // AAFL (Liu et al.): the aggregation ratio chosen per aggregation by the greedy policy.
      {"aafl", true, "{S} --ratio=greedy"},
      // FedAvg's rounds combined by a robust rule (ALGORITHMS.md §13; the rule's parameters
      // after the name: krum:f=2): coordinate-wise median, trimmed mean, Krum, norm bounding.
      {"median", true, kRobust},
      {"trimmed_mean", true, kRobust},
      {"krum", true, kRobust},
      {"norm_bound", true, kRobust},
  };
  return presets;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

StatusOr<double> Number(const std::string& name, const std::string& value, double min) {
  try {
    size_t used = 0;
    const double v = std::stod(value, &used);
    if (used == value.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  return Status::InvalidArgument(
      fmt::format("--{} needs a number >= {}, got '{}'", name, min, value));
}

// One of `hetps fed`'s own options: sets it and returns true; false for any other flag.
StatusOr<bool> SetOwn(FedArgs& a, const std::string& name, const std::string& value) {
  struct Int {
    const char* name;
    int* field;
    int min;
  };
  for (const Int& o : {Int{"clients", &a.clients, 1}, Int{"servers", &a.servers, 1},
                       Int{"parallel", &a.parallel, 1}, Int{"per_round", &a.per_round, 1},
                       Int{"uploads", &a.uploads, 1}, Int{"eval_uploads", &a.eval_uploads, 1},
                       Int{"repeats", &a.repeats, 1}, Int{"grace_ms", &a.grace_ms, 0},
                       Int{"clients_per_process", &a.clients_per_process, 1}}) {
    if (name != o.name) continue;
    auto v = Number(name, value, o.min);
    if (!v.ok()) return v.status();
    if (*v != std::floor(*v) || *v > 1e9) {
      return Status::InvalidArgument("--" + name + " needs an integer of at most 1e9");
    }
    *o.field = static_cast<int>(*v);
    return true;
  }
  if (name == "target") {
    auto v = Number(name, value, 0);
    if (!v.ok()) return v.status();
    if (*v > 1) return Status::InvalidArgument("--target is an accuracy in [0, 1]");
    a.target = *v;
    return true;
  }
  if (name == "algorithm") {
    a.algorithms.push_back(value);
    return true;
  }
  if (name == "algorithms") {
    std::stringstream in(value);
    for (std::string item; std::getline(in, item, ',');) {
      if (!item.empty()) a.algorithms.push_back(item);
    }
    return true;
  }
  if (name == "run_dir" || name == "bin_dir" || name == "flagfile" || name == "client_cmd") {
    (name == "run_dir"    ? a.run_dir
     : name == "bin_dir"  ? a.bin_dir
     : name == "flagfile" ? a.flagfile
                          : a.client_cmd) = value;
    return true;
  }
  return false;
}

// The flags of one algorithm item: "name" (a preset) or "file.flags", then its "+--flag=value"
// parts (`own`), which go after everything else.
struct ItemFlagSets {
  std::vector<std::string> algorithm, own;
};
StatusOr<ItemFlagSets> ItemFlags(const std::string& item, const FedArgs& args) {
  std::vector<std::string> parts;
  size_t at = 0;
  for (size_t plus = item.find("+--"); plus != std::string::npos;
       at = plus + 1, plus = item.find("+--", at)) {
    parts.push_back(item.substr(at, plus - at));
  }
  parts.push_back(item.substr(at));
  ItemFlagSets sets;
  const std::string& base = parts[0];
  if (base.size() > 6 && base.ends_with(".flags")) {
    if (Status s = ReadFlagfile(base, sets.algorithm); !s.ok()) return s;
  } else {
    auto preset = FedAlgorithmFlags(base, args);
    if (!preset.ok()) return preset.status();
    sets.algorithm = std::move(*preset);
  }
  sets.own.assign(parts.begin() + 1, parts.end());
  return sets;
}

// Splits "--name=value" / "--name value" (for hetps fed's own options) into name and value;
// advances i past a separate value.
std::pair<std::string, std::string> NameValue(const std::vector<std::string>& args, size_t& i) {
  const std::string& arg = args[i];
  const std::string name = FlagName(arg);
  if (arg.find('=') != std::string::npos) return {name, arg.substr(arg.find('=') + 1)};
  FedArgs probe;
  auto own = SetOwn(probe, name, "1");
  if (own.ok() && *own && i + 1 < args.size()) return {name, args[++i]};
  return {name, ""};
}

struct Progress {
  size_t rows = 0;
  size_t measured = 0;
};

// Prints the evaluator's measurements that appeared in the rounds log since the last call.
void ShowProgress(const RunSeries& series, const std::string& name, const std::string& rounds_csv,
                  int64_t aggregations, double target, Progress& p) {
  auto outcome = ParseFedOutcome(Slurp(rounds_csv), target);
  if (!outcome.ok()) return;  // not written yet, or a row half written
  for (; p.measured < outcome->curve.size(); ++p.measured) {
    const FedOutcome::Point& m = outcome->curve[p.measured];
    series.Say(fmt::format(
        "{}: aggregation {}/{}  {:.1f} s  uplink {:.1f} MB  test accuracy {:.4f}", name,
        m.aggregation, aggregations, m.wall_s, static_cast<double>(m.bytes_up) / 1e6, m.accuracy));
  }
}

// --dp=central: the servers add the noise to each round's sum, so the rounds' aggregator
// becomes dp_fedavg with the same clip and noise; presets that are not FedAvg's rounds refuse it.
Status CentralPrivacy(const std::string& dp, std::string& flags) {
  if (dp.empty()) return Status();
  auto p = ParsePrivacy(dp);
  if (!p.ok()) return p.status();
  if (p->mode != Privacy::Mode::kCentral) return Status();
  const std::string fedavg = "--aggregator=fedavg ";
  if (flags.find(fedavg) == std::string::npos) {
    return Status::InvalidArgument(
        "central noise is DP-FedAvg's, added to FedAvg's rounds (fedavg, fedprox, fedlesscan); "
        "--dp=local works with every algorithm");
  }
  flags = Replace(flags, fedavg,
                  fmt::format("--aggregator=dp_fedavg:clip={:g},noise={:g} ", p->clip, p->noise));
  return Status();
}

// --secure_aggregation: the servers learn only each round's sum, which FedAvg's rounds use as
// they are; FedBuff's buffer becomes a cohort of K clients granted together (its secure round),
// so its step counts K uploads (`grouped`); the presets of other aggregators or late results
// refuse it.
Status SecurePreset(const std::string& secure, std::string& flags, bool& grouped) {
  if (secure.empty() || secure == "off") return Status();
  if (flags.find("--aggregator=fedbuff:") != std::string::npos) {
    flags += " --clients_per_round={K}";
    grouped = true;
    return Status();
  }
  if (flags.find("--aggregator=fedavg ") == std::string::npos ||
      flags.find("--late_rounds") != std::string::npos) {
    return Status::InvalidArgument(
        "secure aggregation gives the servers only each round's sum: it runs with FedAvg's "
        "synchronous rounds (fedavg, fedprox) and FedBuff's buffer (fedbuff, as cohorts)");
  }
  return Status();
}

}  // namespace

std::vector<std::string> FedPresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : Presets()) names.push_back(p.name);
  return names;
}

StatusOr<std::vector<std::string>> FedAlgorithmFlags(const std::string& algorithm,
                                                     const FedArgs& a) {
  const auto& presets = Presets();
  // A robust rule's preset takes its aggregator's parameters: krum:f=2.
  const std::string base = algorithm.substr(0, algorithm.find(':'));
  const auto it =
      std::find_if(presets.begin(), presets.end(), [&](const Preset& p) { return base == p.name; });
  if (it == presets.end()) {
    return Status::NotFound(fmt::format("no algorithm '{}' (presets: {}; or a .flags file)",
                                        algorithm, fmt::join(FedPresetNames(), ", ")));
  }
  if (base != algorithm && std::string_view(it->flags).find("{A}") == std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("the preset {} takes no parameters (given '{}')", base, algorithm));
  }
  if (a.per_round > a.parallel) {
    return Status::InvalidArgument(fmt::format(
        "--per_round={} is more than --parallel={}: an aggregation cannot wait for more uploads "
        "than clients train at once",
        a.per_round, a.parallel));
  }
  std::vector<std::string> models = a.scenario_flags;
  models.insert(models.end(), a.role_flags.begin(), a.role_flags.end());
  const std::string model = LastFlagValue(models, "model");
  std::string flags = it->flags;
  flags = Replace(flags, "{R}", kRounds);
  if (Status s = CentralPrivacy(LastFlagValue(models, "dp"), flags); !s.ok()) {
    return Status::InvalidArgument(fmt::format("{} with --dp: {}", algorithm, s.message()));
  }
  bool grouped = it->grouped;
  if (Status s = SecurePreset(LastFlagValue(models, "secure_aggregation"), flags, grouped);
      !s.ok()) {
    return Status::InvalidArgument(
        fmt::format("{} with --secure_aggregation: {}", algorithm, s.message()));
  }
  const int per = grouped ? a.per_round : 1;
  const int64_t rounds = (a.uploads + per - 1) / per;
  const int64_t eval_every = std::max(1, a.eval_uploads / per);
  flags = Replace(flags, "{S}", kFedSa);
  flags = Replace(flags, "{A}", algorithm);
  flags = Replace(flags, "{P}", std::to_string(a.parallel));
  flags = Replace(flags, "{K}", std::to_string(a.per_round));
  flags = Replace(flags, "{O}", fmt::format("{:g}", static_cast<double>(a.parallel) / a.per_round));
  flags = Replace(flags, "{D}", model == "cnn" ? "2" : "1");  // the dense layers / the last one
  flags += fmt::format(" --rounds={} --eval_every={}", rounds, eval_every);
  return Words(flags);
}

namespace {

// A scenario's flags; a "--flagfile=F" line includes F (relative to the including file's
// folder) in its place, so that a scenario can build on another.
Status ReadScenario(const std::string& path, std::vector<std::string>& out, int depth) {
  if (depth > 8) return Status::InvalidArgument(path + ": flag files include each other too deep");
  std::vector<std::string> lines;
  if (Status s = ReadFlagfile(path, lines); !s.ok()) return s;
  for (const std::string& line : lines) {
    if (FlagName(line) != "flagfile") {
      out.push_back(line);
      continue;
    }
    fs::path included = line.substr(line.find('=') + 1);
    if (included.is_relative()) included = fs::path(path).parent_path() / included;
    if (Status s = ReadScenario(included.string(), out, depth + 1); !s.ok()) return s;
  }
  return Status();
}

}  // namespace

// The --evaluators the runs' roles get (the scenario's or the command line's; 0 when unset).
StatusOr<int> EvaluatorsOf(const FedArgs& a) {
  std::vector<std::string> roles = a.scenario_flags;
  roles.insert(roles.end(), a.role_flags.begin(), a.role_flags.end());
  const std::string e = LastFlagValue(roles, "evaluators");
  return e.empty() ? 0 : IntArg("evaluators", e, 0);
}

namespace {

// Whether `item` resolves to flags, its selection seed (a repeat counts up from it) included.
Status CheckItem(const FedArgs& a, const std::string& item) {
  auto flags = ItemFlags(item, a);
  if (!flags.ok()) return flags.status();
  std::vector<std::string> all = a.scenario_flags;
  all.insert(all.end(), flags->algorithm.begin(), flags->algorithm.end());
  all.insert(all.end(), a.role_flags.begin(), a.role_flags.end());
  all.insert(all.end(), flags->own.begin(), flags->own.end());
  if (const std::string seed = LastFlagValue(all, "selection_seed"); !seed.empty()) {
    if (auto s = SeedArg("selection_seed", seed); !s.ok()) return s.status();
  }
  return Status();
}

}  // namespace

StatusOr<FedArgs> ParseFedArgs(const std::vector<std::string>& args) {
  if (args.empty() || (args[0] != "run" && args[0] != "compare")) {
    return Status::InvalidArgument("expected 'run' or 'compare'");
  }
  FedArgs a;
  a.compare = args[0] == "compare";
  // hetps fed's own options from the command line, applied after the scenario's.
  std::vector<std::pair<std::string, std::string>> own;
  for (size_t i = 1; i < args.size(); ++i) {
    if (FlagName(args[i]).empty()) {
      return Status::InvalidArgument(fmt::format("'{}' is not a flag", args[i]));
    }
    const std::string arg = args[i];
    auto [name, value] = NameValue(args, i);
    FedArgs probe;
    auto is_own = SetOwn(probe, name, value);
    if (!is_own.ok()) return is_own.status();
    if (*is_own) {
      own.push_back({name, value});
    } else {
      a.role_flags.push_back(arg);
    }
  }
  for (const auto& [name, value] : own) {
    if (name == "flagfile") a.flagfile = value;
  }
  if (a.flagfile.empty()) {
    return Status::InvalidArgument("give the scenario: --flagfile=deploy/edge/<scenario>.flags");
  }
  std::vector<std::string> scenario;
  if (Status s = ReadScenario(a.flagfile, scenario, 0); !s.ok()) return s;
  for (const std::string& line : scenario) {
    const size_t eq = line.find('=');
    auto is_own = SetOwn(a, FlagName(line), eq == std::string::npos ? "" : line.substr(eq + 1));
    if (!is_own.ok()) return Status::InvalidArgument(a.flagfile + ": " + is_own.status().message());
    if (!*is_own) a.scenario_flags.push_back(line);
  }
  if (std::any_of(own.begin(), own.end(), [](const auto& o) {
        return o.first == "algorithm" || o.first == "algorithms";
      })) {
    a.algorithms.clear();  // the command line's algorithms replace the scenario's
  }
  for (const auto& [name, value] : own) (void)SetOwn(a, name, value);
  if (a.algorithms.empty()) a.algorithms = {"fedavg"};
  if (a.clients_per_process > 1 && a.client_cmd.empty()) {
    return Status::InvalidArgument(
        "--clients_per_process pools clients of a --client_cmd program; hetps-worker runs one");
  }
  if (!a.compare && a.algorithms.size() != 1) {
    return Status::InvalidArgument("'run' runs one algorithm; use 'compare' for several");
  }
  for (const std::string& item : a.algorithms) {  // every item resolves before any run
    if (Status s = CheckItem(a, item); !s.ok()) return s;
  }
  if (auto evaluators = EvaluatorsOf(a); !evaluators.ok()) return evaluators.status();
  return a;
}

namespace {

// The launch flags of repeat `repeat` of `item`: the scenario's, `extra`, then the algorithm's,
// the command line's role flags and the item's own parts; a repeat after the first draws its
// selection with the next seed.
StatusOr<std::vector<std::string>> RunFlags(const FedArgs& args, const std::string& item,
                                            int repeat, const std::vector<std::string>& extra) {
  auto flags = ItemFlags(item, args);
  if (!flags.ok()) return flags.status();
  std::vector<std::string> algorithm = flags->algorithm;
  algorithm.insert(algorithm.end(), args.role_flags.begin(), args.role_flags.end());
  algorithm.insert(algorithm.end(), flags->own.begin(), flags->own.end());
  if (repeat > 0) {  // another draw of the selection, the same scenario
    std::vector<std::string> all = args.scenario_flags;
    all.insert(all.end(), algorithm.begin(), algorithm.end());
    const std::string given = LastFlagValue(all, "selection_seed");
    auto seed = given.empty() ? StatusOr<int64_t>(1) : SeedArg("selection_seed", given);
    if (!seed.ok()) return seed.status();
    algorithm.push_back(fmt::format("--selection_seed={}", *seed + repeat));
  }
  std::vector<std::string> launch = args.scenario_flags;
  launch.insert(launch.end(), extra.begin(), extra.end());
  launch.insert(launch.end(), algorithm.begin(), algorithm.end());
  return launch;
}

// A finished run's outcome from its rounds log, said; nullopt (said) when it does not parse. A
// launch that failed (a client process died: killed, or its program crashed) still counts when
// the scheduler made every aggregation of the run: a client lost mid-run is an event of
// federated training, and the rounds log says what it cost.
std::optional<FedOutcome> Outcome(const RunSeries& series, const FedArgs& args,
                                  const std::string& item, const std::string& dir,
                                  RunSeries::End end, const std::vector<std::string>& flags) {
  auto outcome = ParseFedOutcome(Slurp(dir + "/rounds.csv"), args.target);
  if (end == RunSeries::End::kFailed) {
    auto planned = IntArg("rounds", LastFlagValue(flags, "rounds"), 1);
    if (!outcome.ok() || !planned.ok() || outcome->aggregations < *planned) return std::nullopt;
    series.Say(
        fmt::format("{}: a process of the run failed (see launch.log), but all {} "
                    "aggregations were made: the run counts",
                    item, outcome->aggregations));
  }
  if (!outcome.ok()) {
    series.Say(fmt::format("{}: {}", item, outcome.status().message()));
    return std::nullopt;
  }
  const auto& t = outcome->at_target;
  series.Say(
      fmt::format("{}: {}; final accuracy {:.4f} after {} aggregations in {:.1f} s", item,
                  t ? fmt::format("{} reached after {:.1f} s and {:.1f} MB uplink", args.target,
                                  t->wall_s, static_cast<double>(t->bytes_up) / 1e6)
                    : fmt::format("{} not reached", args.target),
                  outcome->final_accuracy().value_or(0), outcome->aggregations, outcome->wall_s));
  return std::move(*outcome);
}

// Run `i` of the series: its algorithm item and repeat, its folder and the name it is said by.
struct FedRunName {
  std::string base_item, item, dir;
  int repeat = 0;
};
FedRunName NameRun(const FedArgs& args, const std::string& root, size_t i) {
  FedRunName n;
  n.base_item = args.algorithms[i / static_cast<size_t>(args.repeats)];
  n.repeat = static_cast<int>(i % static_cast<size_t>(args.repeats));
  n.dir = args.compare ? root + "/" + DirName(n.base_item) : root;
  n.item = n.base_item;
  if (args.repeats > 1) {
    n.dir += fmt::format("/r{}", n.repeat + 1);
    n.item += fmt::format(" #{}", n.repeat + 1);
  }
  return n;
}

// The launch of run `named` with `flags` and `workers` workers, its progress lines shown
// through `progress` (which outlives the run).
SeriesRun MakeSeriesRun(const FedArgs& args, const std::string& self, const FedRunName& named,
                        const std::vector<std::string>& flags, int workers, const RunSeries& series,
                        Progress& progress) {
  // For the progress line; the launch refuses a --rounds that is no number before it starts.
  auto rounds = IntArg("rounds", LastFlagValue(flags, "rounds"), 0);
  const int64_t aggregations = rounds.ok() ? *rounds : 0;
  SeriesRun run;
  run.label = named.item;
  run.dir = named.dir;
  std::vector<std::string> launch = flags;
  if (!args.client_cmd.empty()) {  // launch's own options: they may come anywhere
    launch.push_back("--worker_cmd=" + args.client_cmd);
    launch.push_back(fmt::format("--workers_per_process={}", args.clients_per_process));
  }
  run.argv =
      LaunchArgv(self, {args.servers, workers, named.dir, args.bin_dir, args.grace_ms}, launch);
  run.headline = fmt::format("{} clients, {} aggregations", args.clients, aggregations);
  run.progress = [&series, &progress, &args, named, aggregations] {
    ShowProgress(series, named.item, named.dir + "/rounds.csv", aggregations, args.target,
                 progress);
  };
  return run;
}

// The whole comparison's report in `root`.
Status WriteReport(const FedArgs& args, const std::string& root,
                   const std::vector<FedOutcome>& outcomes) {
  const std::string clients =
      args.client_cmd.empty()
          ? "the C++ edge client"
          : fmt::format("`{}`{}", args.client_cmd,
                        args.clients_per_process > 1
                            ? fmt::format(" ({} per process)", args.clients_per_process)
                            : "");
  const std::string how = fmt::format(
      "Scenario `{}`, {} clients ({}), {} servers; {} clients training at once, {} uploads per "
      "aggregation where an algorithm groups them, {} applied uploads per run, the evaluator "
      "measuring every {} uploads; {} run(s) per algorithm. Extra flags: {}.",
      args.flagfile, args.clients, clients, args.servers, args.parallel, args.per_round,
      args.uploads, args.eval_uploads, args.repeats,
      args.role_flags.empty() ? "none" : fmt::format("`{}`", fmt::join(args.role_flags, " ")));
  return WriteFedReport(root, outcomes, args.target, how);
}

}  // namespace

int RunFed(const FedArgs& args, const std::string& self) {
  const std::string root =
      fs::absolute(args.run_dir.empty() ? "runs/fed-" + Timestamp() : args.run_dir)
          .lexically_normal()
          .string();
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    std::fprintf(stderr, "hetps fed: cannot create %s: %s\n", root.c_str(), ec.message().c_str());
    return 1;
  }
  auto given = EvaluatorsOf(args);  // checked by ParseFedArgs
  // The report needs an evaluator's accuracy.
  const int evaluators = given.ok() && *given > 0 ? *given : 1;
  const std::vector<std::string> extra = given.ok() && *given > 0
                                             ? std::vector<std::string>{}
                                             : std::vector<std::string>{"--evaluators=1"};
  RunSeries series("fed", "fed.item");
  std::vector<FedOutcome> outcomes;
  bool failed = false;
  const size_t runs = args.algorithms.size() * static_cast<size_t>(args.repeats);
  for (size_t i = 0; i < runs; ++i) {
    const FedRunName named = NameRun(args, root, i);
    const std::string& base_item = named.base_item;
    const int repeat = named.repeat;
    const std::string& dir = named.dir;
    const std::string& item = named.item;
    auto flags = RunFlags(args, base_item, repeat, extra);
    if (!flags.ok()) {
      std::fprintf(stderr, "hetps fed: %s\n", flags.status().message().c_str());
      return 2;
    }
    Progress progress;
    const SeriesRun run =
        MakeSeriesRun(args, self, named, *flags, args.clients + evaluators, series, progress);
    const RunSeries::End end = series.Run(run, i + 1, runs);
    if (end == RunSeries::End::kInterrupted) return series.InterruptedCode();
    if (end == RunSeries::End::kRefused) return 2;
    std::optional<FedOutcome> outcome = Outcome(series, args, item, dir, end, *flags);
    if (!outcome) {
      failed = true;
      continue;
    }
    outcome->name = base_item;
    outcome->repeat = repeat;
    outcome->dir = dir;
    if (args.compare || args.repeats > 1) {
      (void)WriteFedReport(dir, {*outcome}, args.target, "One run of " + item + ".");
    }
    outcomes.push_back(std::move(*outcome));
  }
  if (outcomes.empty()) return 1;
  if (Status s = WriteReport(args, root, outcomes); !s.ok()) {
    std::fprintf(stderr, "hetps fed: %s\n", s.message().c_str());
    return 1;
  }
  series.Say(fmt::format("report: {0}/report.md, {0}/summary.json, {0}/plot.png", root));
  std::fputs(Slurp(root + "/report.md").c_str(), stdout);
  return failed ? 1 : 0;
}

}  // namespace hetps
