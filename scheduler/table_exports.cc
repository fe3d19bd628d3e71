#include "scheduler/table_exports.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "common/cluster_view.h"
#include "common/json_file.h"
#include "common/message.h"

namespace hetps {
namespace {

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// Why an export of `request` cannot start, or OK; fills the manifest's table fields.
Status Check(const proto::TableExport& request, const ShardMap* map, proto::TableExport& manifest) {
  if (map == nullptr) return Status::Unavailable("no shard map yet: no table was declared");
  const int32_t t = map->TensorId(request.table());
  if (t < 0 || !map->tensors()[t].is_table()) {
    std::string tables;
    for (const TensorSpec& s : map->tensors()) {
      if (s.is_table()) tables += (tables.empty() ? "" : ", ") + s.name;
    }
    return Status::NotFound(fmt::format("no sparse table '{}' (tables: {})", request.table(),
                                        tables.empty() ? "none" : tables));
  }
  if (request.dir().empty() || request.dir().front() != '/') {
    return Status::InvalidArgument(
        fmt::format("the export dir must be an absolute path, got '{}'", request.dir()));
  }
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(request.dir()) / kExportManifestName, ec)) {
    return Status::FailedPrecondition(
        fmt::format("{} holds an export already; give each export its own dir", request.dir()));
  }
  manifest.set_table(request.table());
  manifest.set_dir(request.dir());
  manifest.set_full(request.full());
  manifest.set_buckets(static_cast<int32_t>(map->PartitionsOf(t).size()));
  manifest.set_dim(map->tensors()[t].table.dim);
  manifest.set_format(kExportFormat);
  return Status();
}

}  // namespace

void TableExports::Request(const Arrival& requester, const proto::TableExport& request,
                           const ShardMap* map, double now) {
  auto refuse = [&](const Status& s) {
    proto::Header req;
    req.set_request_id(requester.request_id);
    actions_.reply(requester, ErrorReply(req, s, kSchedulerId));
  };
  Attempt attempt;
  attempt.requester = requester;
  attempt.started = now;
  if (Status s = Check(request, map, attempt.manifest); !s.ok()) return refuse(s);
  for (const auto& [id, a] : attempts_) {
    if (a.manifest.table() == request.table()) {
      return refuse(Status::Unavailable(
          fmt::format("an export of table '{}' into {} is under way; try again once it is done",
                      request.table(), a.manifest.dir())));
    }
  }
  const std::vector<int32_t> servers = actions_.live_servers();
  if (servers.empty()) return refuse(Status::Unavailable("no live server"));
  const uint64_t id = next_id_++;
  attempt.asked = {servers.begin(), servers.end()};
  attempt.waiting = attempt.asked;
  proto::Header h;
  h.set_type(proto::EXPORT);
  h.set_sender(kSchedulerId);
  h.set_request_id(id);
  proto::TableExport* what = h.mutable_table_export();
  what->set_table(request.table());
  what->set_dir(request.dir());
  what->set_full(request.full());
  attempts_.emplace(id, std::move(attempt));
  for (int32_t s : servers) actions_.send(s, h);
  spdlog::info("export of table '{}'{} into {} requested from {} servers", request.table(),
               request.full() ? " (full)" : "", request.dir(), servers.size());
}

void TableExports::OnAnswer(int32_t server, const proto::Header& h, double now) {
  auto it = attempts_.find(h.request_id());
  if (it == attempts_.end() || h.table_export().table() != it->second.manifest.table() ||
      !it->second.waiting.erase(server)) {
    return;  // stale: an earlier incarnation's, or a repeat
  }
  Attempt& a = it->second;
  if (h.type() == proto::EXPORT_DONE) {
    for (const proto::BucketExport& f : h.table_export().files()) *a.manifest.add_files() = f;
    a.manifest.set_seconds(std::max(a.manifest.seconds(), h.table_export().seconds()));
  } else if (a.failed.ok()) {
    a.failed = Status(StatusOf(h).code(), fmt::format("server {}: {}", server, h.error_message()));
  }
  if (!a.waiting.empty()) return;
  if (!a.failed.ok()) return Fail(it->first, a.failed);
  Finish(it->first, now);
}

void TableExports::OnServerDead(int32_t server) {
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    const uint64_t id = it->first;
    ++it;  // Fail erases
    Attempt& a = attempts_.at(id);
    if (a.asked.erase(server) == 0) continue;
    Fail(id, Status::Unavailable(fmt::format(
                 "server {} died during the export; its buckets were not all written", server)));
  }
}

void TableExports::Finish(uint64_t id, double now) {
  Attempt& a = attempts_.at(id);
  proto::TableExport& m = a.manifest;
  std::sort(m.mutable_files()->begin(), m.mutable_files()->end(),
            [](const auto& x, const auto& y) { return x.bucket() < y.bucket(); });
  for (const proto::BucketExport& f : m.files()) {
    m.set_rows(m.rows() + f.rows());
    m.set_tombstones(m.tombstones() + f.tombstones());
  }
  if (m.files_size() != m.buckets()) {
    return Fail(id, Status::Internal(fmt::format("the servers wrote {} of the table's {} buckets",
                                                 m.files_size(), m.buckets())));
  }
  m.set_written_at(UtcNow());
  if (Status s = WriteJsonFile(m.dir(), kExportManifestName, m); !s.ok()) return Fail(id, s);
  spdlog::info("export of table '{}' complete: {} rows, {} tombstones in {} files, {} ({:.2f} s)",
               m.table(), m.rows(), m.tombstones(), m.files_size(), m.dir(), now - a.started);
  proto::Header r;
  r.set_type(proto::EXPORT);
  r.set_sender(kSchedulerId);
  r.set_request_id(a.requester.request_id);
  *r.mutable_table_export() = m;
  actions_.reply(a.requester, r);
  attempts_.erase(id);
}

void TableExports::Fail(uint64_t id, const Status& why) {
  Attempt& a = attempts_.at(id);
  spdlog::error("export of table '{}' failed: {}", a.manifest.table(), why.ToString());
  proto::Header h;
  h.set_type(proto::EXPORT);
  h.set_sender(kSchedulerId);
  h.set_request_id(id);
  h.mutable_table_export()->set_table(a.manifest.table());
  h.mutable_table_export()->set_abort(true);
  for (int32_t s : a.asked) actions_.send(s, h);
  proto::Header req;
  req.set_request_id(a.requester.request_id);
  actions_.reply(
      a.requester,
      ErrorReply(req,
                 Status(why.code(),
                        fmt::format("{} (the next export of the table is full)", why.message())),
                 kSchedulerId));
  attempts_.erase(id);
}

void TableExports::Shutdown() {
  while (!attempts_.empty()) {
    Fail(attempts_.begin()->first,
         Status::Aborted("the cluster shut down before the export was complete"));
  }
}

}  // namespace hetps
