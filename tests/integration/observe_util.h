// What the observability tests share beside tests/integration/local_cluster.h (Shell, FreePort):
// a tool on PATH, a child process whose output is collected, and a JSON page from the
// scheduler's HTTP server.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "tests/integration/local_cluster.h"

namespace hetps::testing {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

inline bool Have(const std::string& tool) {
  return std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) == 0;
}

// A child process whose output is collected on a thread.
class Child {
 public:
  explicit Child(const std::string& command) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
      _exit(127);
    }
    close(fds[1]);
    reader_ = std::thread([this, fd = fds[0]] {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        output_.append(buf, n);
      }
      close(fd);
    });
  }
  ~Child() { Stop(); }
  std::string output() {
    std::lock_guard<std::mutex> lock(mu_);
    return output_;
  }
  // SIGTERM, then the exit code (128 + signal when killed by one).
  int Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      waitpid(pid_, &st, 0);
      code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      pid_ = -1;
      reader_.join();
    }
    return code_;
  }

 private:
  pid_t pid_ = -1;
  int code_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::string output_;
};

inline Json GetJson(httplib::Client& http, const std::string& path) {
  auto r = http.Get(path.c_str());
  if (!r || r->status != 200) return Json();
  return Json::parse(r->body, nullptr, false);
}

}  // namespace hetps::testing
