// StatusHttp: the scheduler's HTTP face, on its own thread (cpp-httplib):
//   GET /metrics      Prometheus text exposition format 0.0.4
//   GET /api/status   JSON (scheduler/cluster_stats.h)
//   GET /             the live dashboard: static files from `dashboard_dir` (index.html, its
//                     script and the bundled charting library; nothing comes from the network)
// The loop thread publishes rendered text; requests never touch the loop's state.
//
// Thread-safety: Publish() may be called from any thread while the server runs.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace httplib {
class Server;
}

namespace hetps {

class StatusHttp {
 public:
  // `port` 0 picks a free one (see port()).
  StatusHttp(std::string host, int port, std::string dashboard_dir);
  ~StatusHttp();  // stops serving
  StatusHttp(const StatusHttp&) = delete;
  StatusHttp& operator=(const StatusHttp&) = delete;

  // Binds and starts serving; fails when the port cannot be bound.
  Status Start();
  int port() const { return port_; }
  void Publish(std::string status_json, std::string metrics);

 private:
  std::string host_;
  int port_;
  std::string dashboard_dir_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::mutex mu_;
  std::string status_json_ = "{}";
  std::string metrics_;
};

// The dashboard's files installed beside the binaries: <exe dir>/../share/hetps/dashboard.
std::string DefaultDashboardDir();

}  // namespace hetps
