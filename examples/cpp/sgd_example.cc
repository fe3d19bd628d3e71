// A minimal trainer through hetps: every worker descends f(w) = |w - target|^2 / 2 with
// gradients pushed to the servers (lr 1 on the servers' SGD: each push moves w), pulling w back
// each step. Run it against a cluster:
//   hetps-scheduler --num_servers=1 --num_workers=1 &   (prints its endpoint)
//   hetps-server --scheduler=tcp://127.0.0.1:PORT --optimizer=sgd:lr=0.5 --init=zeros &
//   ./sgd_example tcp://127.0.0.1:PORT        (or HETPS_SCHEDULER=tcp://... ./sgd_example)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hetps/client.h"

int main(int argc, char** argv) {
  const char* env = std::getenv("HETPS_SCHEDULER");
  hetps::ClientOptions options;
  options.scheduler = argc > 1 ? argv[1] : env != nullptr ? env : "";
  if (options.scheduler.empty()) {
    std::fprintf(stderr, "usage: sgd_example tcp://scheduler:port (or HETPS_SCHEDULER)\n");
    return 2;
  }
  auto client = hetps::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "cannot join: %s\n", client.status().ToString().c_str());
    return 1;
  }
  constexpr int64_t kN = 1000;
  if (hetps::Status s = (*client)->DeclareTensors({{"w", {kN}, 0}}); !s.ok()) {
    std::fprintf(stderr, "declare: %s\n", s.ToString().c_str());
    return 1;
  }
  std::vector<float> w(kN), grad(kN);
  double distance = 0;
  for (int step = 0; step < 20; ++step) {
    if (hetps::Status s = (*client)->Pull("w", w.data(), kN).Wait(); !s.ok()) {
      std::fprintf(stderr, "pull: %s\n", s.ToString().c_str());
      return 1;
    }
    distance = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const float target = static_cast<float>(i % 7);
      grad[i] = w[i] - target;
      distance += double{grad[i]} * grad[i];
    }
    if (hetps::Status s = (*client)->Push("w", grad.data(), kN).Wait(); !s.ok()) {
      std::fprintf(stderr, "push: %s\n", s.ToString().c_str());
      return 1;
    }
    (void)(*client)->Clock();
  }
  std::printf("sgd_example: distance to the target after 20 steps %.6f\n", std::sqrt(distance));
  (void)(*client)->Finish();
  return 0;
}
