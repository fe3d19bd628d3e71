// What `hetps fed` and `hetps experiment` share: a series of `hetps launch` runs, one after
// another, each in its own folder, that an interrupted command resumes. A folder holding `done`
// is a finished run and is kept if its marker file names the same command (else it is
// refused); one holding the marker but no `done` is what a stopped run left and is started
// again; any other non-empty folder is refused (it is not this command's). Progress shows while a
// run goes; SIGINT/SIGTERM stop the running cluster cleanly.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/signals.h"
#include "common/status.h"

namespace hetps {

// The file's contents ("" when missing or unreadable).
std::string Slurp(const std::string& path);
// Writes `text` to `path` (replacing it); an error names the path and the reason.
Status WriteText(const std::string& path, const std::string& text);
// The local time as YYYYmmdd-HHMMSS, for default folder names.
std::string Timestamp();
// A folder name for `item`: letters, digits, '-' and '.' kept, anything else '_'.
std::string DirName(const std::string& item);

// The command line of one run of a series: `self launch --servers=S --workers=W --run_dir=DIR
// --grace_ms=G [--bin_dir=B]`, then `flags` in order (the last value of a flag wins).
struct LaunchShape {
  int servers = 1, workers = 1;
  std::string run_dir, bin_dir;
  int grace_ms = 10000;
};
std::vector<std::string> LaunchArgv(const std::string& self, const LaunchShape& shape,
                                    const std::vector<std::string>& flags);

struct SeriesRun {
  std::string label;              // what progress lines call it
  std::string dir;                // its folder (created)
  std::vector<std::string> argv;  // the launch command; its output goes to <dir>/launch.log
  std::string headline;           // printed when it starts, after the label
  // Called every half second while the run goes and once after it ended (e.g. to print the
  // evaluations that appeared in the run's log).
  std::function<void()> progress;
};

class RunSeries {
 public:
  enum class End { kFinished, kKept, kFailed, kRefused, kInterrupted };

  // `prefix`: how the command's lines start ("fed", "experiment"); `marker`: the file that
  // marks a folder as one of this command's runs. Constructed before any thread starts (it
  // holds the SignalWatcher).
  RunSeries(std::string prefix, std::string marker);

  // Runs `run` (`index` of `count`, for the progress line, which also estimates the time left
  // at the pace of the runs done so far) unless its folder holds a finished run. kFailed: the
  // launch exited non-zero (said, with the log to read); kRefused: the folder holds something else,
  // or cannot be made (said); kInterrupted: a signal stopped it.
  End Run(const SeriesRun& run, size_t index, size_t count);

  // Prints "[prefix] line".
  void Say(const std::string& line) const;
  // The exit code for an interrupted series: 128 + the signal.
  int InterruptedCode() const { return 128 + signals_.signal(); }

 private:
  // Makes the run's folder its own (its marker); an end when the run goes no further (kept,
  // refused).
  std::optional<End> Claim(const SeriesRun& run, size_t index, size_t count);
  // Runs the launch to its end (`status`: waitpid's); kFailed or kInterrupted when it did not
  // run to an exit.
  std::optional<End> Launch(const SeriesRun& run, int& status);

  std::string prefix_;
  std::string marker_;
  SignalWatcher signals_;
  // The runs this series ran (finished or failed, not kept) and their wall time: the pace the
  // start line's estimate of the time left goes by.
  int ran_ = 0;
  double ran_seconds_ = 0;
};

}  // namespace hetps
