#include "scheduler/http_status.h"

#include <fmt/format.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <filesystem>

namespace hetps {

namespace fs = std::filesystem;

StatusHttp::StatusHttp(std::string host, int port, std::string dashboard_dir)
    : host_(std::move(host)),
      port_(port),
      dashboard_dir_(std::move(dashboard_dir)),
      server_(std::make_unique<httplib::Server>()) {}

StatusHttp::~StatusHttp() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void StatusHttp::Publish(std::string status_json, std::string metrics) {
  std::lock_guard<std::mutex> lock(mu_);
  status_json_ = std::move(status_json);
  metrics_ = std::move(metrics);
}

Status StatusHttp::Start() {
  httplib::Server& s = *server_;
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    res.set_content(metrics_, "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/api/status", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    res.set_header("Cache-Control", "no-store");
    res.set_content(status_json_, "application/json");
  });
  const bool have_dashboard = fs::is_regular_file(fs::path(dashboard_dir_) / "index.html");
  if (have_dashboard) {
    s.set_mount_point("/", dashboard_dir_);
  } else {
    spdlog::warn(
        "no dashboard at {} (build the project, or pass --dashboard_dir); /metrics and "
        "/api/status still serve",
        dashboard_dir_);
    s.Get("/", [this](const httplib::Request&, httplib::Response& res) {
      res.status = 503;
      res.set_content(fmt::format("hetps: the dashboard files are not at {}; /metrics and "
                                  "/api/status serve\n",
                                  dashboard_dir_),
                      "text/plain");
    });
  }
  if (port_ == 0) {
    port_ = s.bind_to_any_port(host_);
    if (port_ < 0) {
      return Status::InvalidArgument(fmt::format("cannot bind HTTP on {}", host_));
    }
  } else if (!s.bind_to_port(host_, port_)) {
    return Status::InvalidArgument(fmt::format(
        "cannot bind HTTP on {}:{} (in use? --http_port=0 picks a free port)", host_, port_));
  }
  thread_ = std::thread([&s] { s.listen_after_bind(); });
  spdlog::info("status on http://{}:{}/ (/metrics, /api/status{})", host_, port_,
               have_dashboard ? ", dashboard" : "");
  return Status();
}

std::string DefaultDashboardDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return (exe.parent_path() / ".." / "share" / "hetps" / "dashboard").lexically_normal().string();
}

}  // namespace hetps
