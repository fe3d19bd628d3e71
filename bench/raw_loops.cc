// The loops hetps-bench pushpull measures hetps against, and its timed slices (bench/raw_loops.h).
#include "bench/raw_loops.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "bench/timing.h"
#include "server/optimizer/optimizer.h"

namespace hetps::bench {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

double CpuSeconds(const std::vector<pid_t>& others) {
  timespec self{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &self);
  double total = static_cast<double>(self.tv_sec) + static_cast<double>(self.tv_nsec) * 1e-9;
  static const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (pid_t pid : others) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t name_end = text.rfind(')');  // the command name may hold spaces
    if (name_end == std::string::npos) continue;
    std::istringstream fields(text.substr(name_end + 1));
    std::string skip;
    for (int field = 3; field < 14; ++field) fields >> skip;  // state .. cmajflt
    double utime = 0, stime = 0;                              // fields 14 and 15, in ticks
    fields >> utime >> stime;
    total += (utime + stime) / ticks_per_s;
  }
  return total;
}

Slice RawZmqGbps(size_t bytes, double seconds, const RawLoop& loop) {
  zmq::context_t rctx(1), sctx(1);
  zmq::socket_t router(rctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  // The work's arrays, only for a loop that does it: the receiver's parameters and optimizer
  // slots (push), the puller's array (pull).
  const bool push_work = loop.work() && !loop.pull, pull_work = loop.work() && loop.pull;
  std::vector<float> values(push_work ? n : 0, 0.f), into(pull_work ? n : 0, 0.f);
  std::vector<std::vector<float>> slots;
  std::vector<float*> slot_ptrs;
  if (push_work) {
    slots.assign(loop.optimizer->num_slots(), std::vector<float>(n, 0.f));
    for (auto& slot : slots) slot_ptrs.push_back(slot.data());
  }
  // What goes out: gradients as the benchmark's clients push them (1e-3). Bytes of 1 would be
  // floats of 2.4e-38, whose products with the learning rate underflow, which made SGD about 3x
  // slower here than on the servers' normal floats.
  std::vector<float> buffer((bytes + sizeof(float) - 1) / sizeof(float), 1e-3f);
  std::atomic<bool> done{false};
  std::thread receiver([&] {
    router.set(zmq::sockopt::rcvtimeo, 200);
    int64_t step = 0;
    while (!done.load()) {
      zmq::message_t id, data;
      if (!router.recv(id)) continue;
      (void)router.recv(data);
      (void)router.send(id, zmq::send_flags::sndmore);
      if (loop.pull) {
        (void)router.send(zmq::message_t(buffer.data(), bytes, nullptr, nullptr),
                          zmq::send_flags::none);
        continue;
      }
      (void)router.send(zmq::buffer("k", 1), zmq::send_flags::none);
      if (push_work && data.size() == bytes) {
        loop.optimizer->Apply(values.data(), static_cast<const float*>(data.data()), n,
                              slot_ptrs.data(), ++step, 1.0f);
      }
    }
  });
  zmq::socket_t dealer(sctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint);
  auto once = [&] {
    if (loop.pull) {
      (void)dealer.send(zmq::buffer("p", 1), zmq::send_flags::none);
    } else {
      (void)dealer.send(zmq::message_t(buffer.data(), bytes, nullptr, nullptr),
                        zmq::send_flags::none);
    }
    zmq::message_t answer;
    (void)dealer.recv(answer);
    if (pull_work) {
      std::memcpy(into.data(), answer.data(), std::min(bytes, answer.size()));
    }
  };
  once();  // connect and warm up
  const auto start = Clock::now();
  const double cpu_start = CpuSeconds({});
  int64_t sent = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    once();
    sent += static_cast<int64_t>(bytes);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const double cpu = CpuSeconds({}) - cpu_start;
  done = true;
  receiver.join();
  return {sent / elapsed / 1e9, sent > 0 ? cpu / (static_cast<double>(sent) / 1e9) : 0};
}

double RawZmqSteps(int messages, size_t bytes, double seconds) {
  zmq::context_t rctx(1), sctx(1);
  zmq::socket_t router(rctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::sndhwm, 0);
  router.set(zmq::sockopt::rcvhwm, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  std::vector<char> reply(bytes, 1);
  std::atomic<bool> done{false};
  std::thread receiver([&] {
    router.set(zmq::sockopt::rcvtimeo, 200);
    while (!done.load()) {
      zmq::message_t id, data;
      if (!router.recv(id)) continue;
      (void)router.recv(data);
      (void)router.send(id, zmq::send_flags::sndmore);
      if (data.size() > 1) {
        (void)router.send(zmq::buffer("k", 1), zmq::send_flags::none);
      } else {
        (void)router.send(zmq::message_t(reply.data(), bytes, nullptr, nullptr),
                          zmq::send_flags::none);
      }
    }
  });
  zmq::socket_t dealer(sctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::sndhwm, 0);
  dealer.set(zmq::sockopt::rcvhwm, 0);
  dealer.connect(endpoint);
  std::vector<std::vector<char>> buffers(messages, std::vector<char>(bytes, 1));
  std::vector<std::vector<char>> into(messages, std::vector<char>(bytes));
  auto step = [&] {
    for (int i = 0; i < messages; ++i) {
      (void)dealer.send(zmq::message_t(buffers[i].data(), bytes, nullptr, nullptr),
                        zmq::send_flags::none);
    }
    for (int i = 0; i < messages; ++i) {
      zmq::message_t ack;
      (void)dealer.recv(ack);
    }
    for (int i = 0; i < messages; ++i) (void)dealer.send(zmq::buffer("p", 1));
    for (int i = 0; i < messages; ++i) {
      zmq::message_t values;
      (void)dealer.recv(values);
      std::memcpy(into[i].data(), values.data(), std::min(bytes, values.size()));
    }
  };
  step();  // connect and warm up
  const auto start = Clock::now();
  int64_t steps = 0;
  double elapsed = 0;
  while (elapsed < seconds) {
    step();
    ++steps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  done = true;
  receiver.join();
  return steps / elapsed;
}

Slice Measure(const std::vector<pid_t>& cluster, int workers, size_t bytes, double seconds,
              const std::function<Status(int)>& op) {
  std::vector<std::thread> threads;
  std::vector<int64_t> moved(workers, 0);
  std::atomic<bool> failed{false};
  std::atomic<int> warm{0};
  std::atomic<bool> go{false};
  Clock::time_point start;
  double cpu_start = 0;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      if (!op(w).ok()) failed = true;
      if (warm.fetch_add(1) + 1 == workers) {
        cpu_start = CpuSeconds(cluster);
        start = Clock::now();
        go.store(true, std::memory_order_release);
      }
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
        if (!op(w).ok()) {
          failed = true;
          return;
        }
        moved[w] += static_cast<int64_t>(bytes);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = CpuSeconds(cluster) - cpu_start;
  if (failed) return {};
  int64_t total = 0;
  for (int64_t m : moved) total += m;
  return {total / elapsed / 1e9, total > 0 ? cpu / (static_cast<double>(total) / 1e9) : 0};
}

double MemcpyGbps(size_t bytes) {
  std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
  std::vector<double> gbps;
  for (int r = 0; r < kRounds; ++r) {
    const int reps = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / bytes));
    const auto start = Clock::now();
    for (int i = 0; i < reps; ++i)
      std::memcpy((i % 2 ? a : b).data(), (i % 2 ? b : a).data(), bytes);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    gbps.push_back(static_cast<double>(bytes) * reps / s / 1e9);
  }
  return Median(gbps);
}

}  // namespace hetps::bench
