#include "cli/run_series.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "common/supervisor.h"

namespace hetps {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status::Internal(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  return Status();
}

std::string Timestamp() {
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return stamp;
}

std::string DirName(const std::string& item) {
  std::string name = item;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  }
  return name;
}

RunSeries::RunSeries(std::string prefix, std::string marker)
    : prefix_(std::move(prefix)), marker_(std::move(marker)) {}

void RunSeries::Say(const std::string& line) const {
  std::printf("[%s] %s\n", prefix_.c_str(), line.c_str());
  std::fflush(stdout);
}

RunSeries::End RunSeries::Run(const SeriesRun& run, size_t index, size_t count) {
  if (signals_.stop().load()) return End::kInterrupted;  // a signal between two runs
  if (std::optional<End> end = Claim(run, index, count)) return *end;
  std::string left;
  if (ran_ > 0) {  // this run and the rest, at the pace so far
    const double s = ran_seconds_ / ran_ * static_cast<double>(count - index + 1);
    left = s < 120 ? fmt::format("; about {:.0f} s left", s)
                   : fmt::format("; about {:.0f} min left", s / 60);
  }
  Say(fmt::format("{} ({}/{}): {}; folder {} (output: launch.log){}", run.label, index, count,
                  run.headline, run.dir, left));
  const auto started = std::chrono::steady_clock::now();
  int status = 0;
  if (std::optional<End> end = Launch(run, status)) return *end;
  ++ran_;
  ran_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Say(fmt::format("{}: the run failed ({}); see {}/launch.log", run.label, DescribeExit(status),
                    run.dir));
    return End::kFailed;
  }
  if (Status s = WriteText(run.dir + "/done", "finished\n"); !s.ok()) {  // a rerun would redo it
    Say(fmt::format("{}: finished, but {}", run.label, s.message()));
  }
  return End::kFinished;
}

std::optional<RunSeries::End> RunSeries::Claim(const SeriesRun& run, size_t index, size_t count) {
  const std::string& dir = run.dir;
  // The marker names the run and its command (less the program's path and --bin_dir: where
  // the programs are, not what they run), so that a finished run is kept only for the same
  // command.
  std::string marker = run.label + "\n";
  for (size_t i = 1; i < run.argv.size(); ++i) {
    if (run.argv[i].rfind("--bin_dir=", 0) != 0) marker += run.argv[i] + "\n";
  }
  if (fs::exists(dir + "/done")) {
    if (Slurp(dir + "/" + marker_) != marker) {
      Say(
          fmt::format("{} holds a finished run of other flags (see its {}); give another "
                      "--run_dir, or remove the folder to run it again",
                      dir, marker_));
      return End::kRefused;
    }
    Say(fmt::format("{} ({}/{}): done before in {}; kept", run.label, index, count, dir));
    return End::kKept;
  }
  std::error_code ec;
  if (fs::exists(dir + "/" + marker_)) {
    fs::remove_all(dir, ec);  // what an interrupted run of this command left
  } else if (fs::exists(dir) && !fs::is_empty(dir, ec)) {
    Say(fmt::format("{} is not empty and holds no run of hetps {}; give another --run_dir", dir,
                    prefix_));
    return End::kRefused;
  }
  fs::create_directories(dir, ec);
  if (ec) {
    Say(fmt::format("cannot create {}: {}", dir, ec.message()));
    return End::kRefused;
  }
  if (Status s = WriteText(dir + "/" + marker_, marker); !s.ok()) {
    Say(s.message());
    return End::kRefused;
  }
  return std::nullopt;
}

std::optional<RunSeries::End> RunSeries::Launch(const SeriesRun& run, int& status) {
  sigset_t shutdown;
  sigemptyset(&shutdown);
  sigaddset(&shutdown, SIGINT);
  sigaddset(&shutdown, SIGTERM);
  SpawnOptions spawn;
  spawn.output_file = run.dir + "/launch.log";
  spawn.truncate = true;
  spawn.unblock = &shutdown;
  spawn.die_with_parent = true;
  auto pid = Spawn(run.argv, spawn);
  if (!pid.ok()) {
    Say(fmt::format("{}: {}", run.label, pid.status().ToString()));
    return End::kFailed;
  }
  bool stopping = false;
  while (true) {
    const pid_t done = waitpid(*pid, &status, WNOHANG);
    if (done == *pid) break;
    if (signals_.stop().load() && !stopping) {
      stopping = true;
      Say("interrupted: stopping the run's cluster");
      kill(*pid, SIGTERM);
    }
    if (run.progress) run.progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  if (run.progress) run.progress();
  if (stopping) return End::kInterrupted;
  return std::nullopt;
}

std::vector<std::string> LaunchArgv(const std::string& self, const LaunchShape& shape,
                                    const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {self,
                                   "launch",
                                   fmt::format("--servers={}", shape.servers),
                                   fmt::format("--workers={}", shape.workers),
                                   "--run_dir=" + shape.run_dir,
                                   fmt::format("--grace_ms={}", shape.grace_ms)};
  if (!shape.bin_dir.empty()) argv.push_back("--bin_dir=" + shape.bin_dir);
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

}  // namespace hetps
