#include "python/py_client.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "python/py_errors.h"

namespace py = pybind11;

namespace hetps {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

void PyTicket::Wait() {
  Status s;
  {
    py::gil_scoped_release unlocked;
    s = p_->on_device ? p_->device.Wait() : p_->ticket.Wait();
  }
  Check(s);
}

std::string PyTicket::Repr() const {
  return "<hetps.Ticket " + p_->op + " '" + p_->tensor + "' " + (Done() ? "done" : "in flight") +
         ">";
}

PyClient::PyClient(std::string scheduler, std::optional<int> rank, std::string push_codec,
                   std::string pull_codec, int heartbeat_interval_ms, int join_timeout_ms,
                   int server_recovery_timeout_ms, std::string auth, std::string keys_dir,
                   std::string key_name, int64_t shared_memory_bytes, int64_t batch_bytes,
                   std::string transport, const LinkOptions& link, double device_slowdown,
                   bool virtual_clock, bool tier) {
  ClientOptions o;
  o.scheduler = scheduler.empty() ? Env("HETPS_SCHEDULER") : scheduler;
  if (o.scheduler.empty()) {
    Raise(Status::InvalidArgument(
        "no scheduler: pass scheduler='tcp://host:port' or set HETPS_SCHEDULER"));
  }
  if (rank) {
    o.rank = *rank;
  } else if (std::string r = Env("HETPS_RANK"); !r.empty()) {
    try {
      o.rank = std::stoi(r);
    } catch (const std::exception&) {
      Raise(Status::InvalidArgument("HETPS_RANK is not an integer: '" + r + "'"));
    }
  }
  o.push_codec = push_codec;
  o.tier = tier;
  o.pull_codec = pull_codec;
  o.heartbeat_interval_ms = heartbeat_interval_ms;
  o.join_timeout_ms = join_timeout_ms;
  o.server_recovery_timeout_ms = server_recovery_timeout_ms;
  if (shared_memory_bytes < 0) {
    Raise(Status::InvalidArgument("shared_memory_bytes must be >= 0"));
  }
  o.shared_memory_bytes = shared_memory_bytes;
  if (batch_bytes < 0) Raise(Status::InvalidArgument("batch_bytes must be >= 0"));
  o.batch_bytes = batch_bytes;
  o.transport = transport;
  if (!(device_slowdown >= 1)) Raise(Status::InvalidArgument("device_slowdown must be >= 1"));
  o.link = link;
  o.device_slowdown = device_slowdown;
  // Virtual time: the link's delays are the caller's model (hetps.VirtualRound), not held here.
  o.virtual_clock = virtual_clock;
  if (virtual_clock) o.link.outside = true;
  o.auth = auth.empty() ? (Env("HETPS_AUTH").empty() ? "none" : Env("HETPS_AUTH")) : auth;
  o.keys_dir = keys_dir.empty() ? Env("HETPS_KEYS") : keys_dir;
  o.key_name = key_name.empty() ? Env("HETPS_KEY") : key_name;
  StatusOr<std::unique_ptr<Client>> connected = Status::Internal("not connected");
  {
    py::gil_scoped_release unlocked;
    connected = Client::Connect(o);
  }
  Check(connected.status());
  client_ = std::move(*connected);
}

PyClient::~PyClient() {
  StopDevices();
  if (client_) {
    py::gil_scoped_release unlocked;
    client_.reset();  // no other thread can be inside a call: each holds the Python object
  }
  pending_.clear();
}

std::shared_ptr<Client> PyClient::client() {
  if (!client_) Raise(Status::FailedPrecondition("the client has finished"));
  return client_;
}

void PyClient::Declare(const py::iterable& tensors) {
  std::vector<TensorSpec> specs;
  for (py::handle t : tensors) {
    TensorSpec spec;
    if (py::isinstance<py::dict>(t)) {
      auto d = py::reinterpret_borrow<py::dict>(t);
      spec.name = py::cast<std::string>(d["name"]);
      spec.shape = py::cast<std::vector<int64_t>>(d["shape"]);
      if (d.contains("layer")) spec.layer = py::cast<int32_t>(d["layer"]);
    } else {
      auto seq = py::cast<py::sequence>(t);
      if (seq.size() < 2 || seq.size() > 3) {
        Raise(Status::InvalidArgument(
            "declare: each tensor is (name, shape) or (name, shape, layer)"));
      }
      spec.name = py::cast<std::string>(seq[0]);
      spec.shape = py::cast<std::vector<int64_t>>(seq[1]);
      if (seq.size() == 3) spec.layer = py::cast<int32_t>(seq[2]);
    }
    specs.push_back(std::move(spec));
  }
  const std::shared_ptr<Client> held = client();
  Client& c = *held;
  Status s;
  {
    py::gil_scoped_release unlocked;
    s = c.DeclareTensors(specs);
  }
  Check(s);
}

PyTicket PyClient::Start(const std::string& op, const std::string& tensor, py::object array,
                         double weight) {
  const std::shared_ptr<Client> held = client();
  Client& c = *held;
  Sweep();
  auto p = std::make_shared<Pending>();
  p->op = op;
  p->tensor = tensor;
  p->memory.push_back(std::make_unique<Borrowed>(std::move(array), op == "pull", op.c_str()));
  float* data = p->memory[0]->data();
  const int64_t n = p->memory[0]->size();
  p->data_ptr = reinterpret_cast<int64_t>(data);
  if (p->memory[0]->on_device()) {
    StartDevice(*p, op, {tensor}, weight);
  } else {
    py::gil_scoped_release unlocked;  // a push with a codec encodes here
    if (op == "push") {
      p->ticket = c.Push(tensor, data, n, weight);
    } else if (op == "pull") {
      p->ticket = c.Pull(tensor, data, n);
    } else {
      p->ticket = c.Init(tensor, data, n);
    }
  }
  pending_.push_back(p);
  return PyTicket(p);
}

PyTicket PyClient::StartMany(const std::string& op, py::object tensors, double weight) {
  const std::shared_ptr<Client> held = client();
  Client& c = *held;
  Sweep();
  auto p = std::make_shared<Pending>();
  p->op = op;
  std::vector<std::string> names;
  py::object pairs = py::isinstance<py::dict>(tensors) ? tensors.attr("items")() : tensors;
  for (py::handle item : py::iter(pairs)) {
    auto pair = py::cast<py::sequence>(item);
    if (pair.size() != 2) {
      Raise(Status::InvalidArgument(op + "_all: each entry is a (name, array) pair"));
    }
    names.push_back(py::cast<std::string>(pair[0]));
    p->memory.push_back(std::make_unique<Borrowed>(py::reinterpret_borrow<py::object>(pair[1]),
                                                   op == "pull", op.c_str()));
  }
  p->tensor = std::to_string(names.size()) + " tensors";
  if (!p->memory.empty()) p->data_ptr = reinterpret_cast<int64_t>(p->memory[0]->data());
  if (!p->memory.empty() && p->memory[0]->on_device()) {
    StartDevice(*p, op, names, weight);
  } else {
    py::gil_scoped_release unlocked;  // pushes with a codec encode here
    if (op == "push") {
      std::vector<Client::ConstTensorView> views;
      for (size_t i = 0; i < names.size(); ++i) {
        views.push_back({names[i], p->memory[i]->data(), p->memory[i]->size()});
      }
      p->ticket = c.Push(views, weight);
    } else {
      std::vector<Client::TensorView> views;
      for (size_t i = 0; i < names.size(); ++i) {
        views.push_back({names[i], p->memory[i]->data(), p->memory[i]->size()});
      }
      p->ticket = c.Pull(views);
    }
  }
  pending_.push_back(p);
  return PyTicket(p);
}

void PyClient::StartDevice(Pending& p, const std::string& op, const std::vector<std::string>& names,
                           double weight) {
  const Borrowed& first = *p.memory[0];
  std::vector<DeviceIo::Tensor> tensors;
  for (size_t i = 0; i < names.size(); ++i) {
    const Borrowed& b = *p.memory[i];
    if (!b.on_device() || b.device() != first.device()) {
      Raise(Status::InvalidArgument(fmt::format(
          "{}: '{}' is {}, '{}' on GPU {}: one call's arrays live on one device", op, names[i],
          b.on_device() ? fmt::format("on GPU {}", b.device()) : "in host memory", names[0],
          first.device())));
    }
    tensors.push_back({names[i], b.data(), b.size()});
  }
  auto& io = devices_[first.device()];
  if (!io) {
    auto made = DeviceIo::Create(client(), first.device());
    if (!made.ok()) devices_.erase(first.device());
    Check(made.status());
    io = std::move(*made);
  }
  p.on_device = true;
  py::gil_scoped_release unlocked;
  if (op == "push") {
    p.device = io->Push(std::move(tensors), weight, first.stream());
  } else if (op == "pull") {
    p.device = io->Pull(std::move(tensors), first.stream());
  } else {
    p.device = io->Init(std::move(tensors), first.stream());
  }
}

void PyClient::StopDevices() {
  auto devices = std::move(devices_);  // under the GIL: no other call sees a half-cleared map
  devices_.clear();
  py::gil_scoped_release unlocked;
  devices.clear();
}

void PyClient::DeclareTable(const std::string& name, const TableOptions& options, int32_t layer) {
  Check(client()->DeclareTable(name, options, layer));
}

PyTicket PyClient::StartRows(const std::string& op, const std::string& table, py::object keys,
                             py::object rows) {
  const std::shared_ptr<Client> held = client();
  Client& c = *held;
  Sweep();
  auto p = std::make_shared<Pending>();
  p->op = op;
  p->tensor = table;
  p->memory.push_back(std::make_unique<Borrowed>(std::move(keys), false, (op + " keys").c_str(),
                                                 Borrowed::Kind::kInt64));
  p->memory.push_back(
      std::make_unique<Borrowed>(std::move(rows), op == "pull_rows", (op + " rows").c_str()));
  const Borrowed& k = *p->memory[0];
  float* data = p->memory[1]->data();
  p->data_ptr = reinterpret_cast<int64_t>(data);
  const ShardMap& map = c.shard_map();
  const int32_t id = map.TensorId(table);
  if (id >= 0 && map.tensors()[id].is_table() &&
      p->memory[1]->size() != k.size() * map.tensors()[id].table.dim) {
    Raise(Status::SizeMismatch(fmt::format("{}: {} keys of table '{}' need {} floats, not {}", op,
                                           k.size(), table, k.size() * map.tensors()[id].table.dim,
                                           p->memory[1]->size())));
  }
  {
    py::gil_scoped_release unlocked;
    p->ticket = op == "push_rows" ? c.PushRows(table, k.keys(), k.size(), data)
                                  : c.PullRows(table, k.keys(), k.size(), data);
  }
  pending_.push_back(p);
  return PyTicket(p);
}

void PyClient::Clock() {
  const std::shared_ptr<Client> held = client();
  Client& c = *held;
  Status s;
  {
    py::gil_scoped_release unlocked;
    s = c.Clock();
  }
  Sweep();
  Check(s);
}

void PyClient::Barrier() {
  const std::shared_ptr<Client> held = client();
  Client& c = *held;
  Status s;
  {
    py::gil_scoped_release unlocked;
    s = c.Barrier();
  }
  Check(s);
}

int64_t PyClient::AwaitRound() {
  const std::shared_ptr<Client> held = client();
  StatusOr<int64_t> round = Status();
  {
    py::gil_scoped_release unlocked;
    round = held->AwaitRound();
  }
  Check(round.status());
  return *round;
}

bool PyClient::FinishRound(std::optional<bool> within_clip, std::optional<double> within_noisy,
                           std::optional<uint32_t> within_masked) {
  const std::shared_ptr<Client> held = client();
  StatusOr<bool> kept = Status();
  {
    py::gil_scoped_release unlocked;
    kept = held->FinishRound({within_clip, within_noisy, within_masked});
  }
  Sweep();
  Check(kept.status());
  return *kept;
}

std::pair<int64_t, bool> PyClient::AwaitRoundsClosed(
    int64_t rounds, std::optional<std::tuple<int64_t, double, double>> measured) {
  const std::shared_ptr<Client> held = client();
  std::optional<Client::Evaluation> evaluation;
  if (measured) {
    evaluation = Client::Evaluation{.round = std::get<0>(*measured),
                                    .loss = std::get<1>(*measured),
                                    .accuracy = std::get<2>(*measured)};
  }
  StatusOr<Client::RoundsClosed> closed = Status();
  {
    py::gil_scoped_release unlocked;
    closed = held->AwaitRoundsClosed(rounds, evaluation);
  }
  Check(closed.status());
  return {closed->closed, closed->finished};
}

void PyClient::Finish() {
  if (!client_) return;
  StopDevices();
  std::shared_ptr<Client> held = std::move(client_);
  Status s;
  {
    py::gil_scoped_release unlocked;
    s = held->Finish();  // waits for every pending ticket
  }
  {
    py::gil_scoped_release unlocked;
    held.reset();
  }
  Sweep();
  Check(s);
}

void PyClient::ReportMetrics(const std::map<std::string, double>& metrics) {
  client()->ReportMetrics(metrics);
}

py::dict PyClient::Stats() {
  ClientStats s = client()->stats();
  py::dict d;
  d["bytes_pushed"] = s.bytes_pushed;
  d["raw_bytes_pushed"] = s.raw_bytes_pushed;
  d["bytes_pulled"] = s.bytes_pulled;
  d["requests"] = s.requests;
  d["messages"] = s.messages;
  d["shared_memory_bytes"] = s.shared_memory_bytes;
  d["reads"] = s.reads;
  d["max_staleness"] = s.max_staleness;
  d["mean_staleness"] = s.mean_staleness();
  d["pushes"] = s.pushes;
  d["max_push_staleness"] = s.max_push_staleness;
  d["mean_push_staleness"] = s.mean_push_staleness();
  d["dropped_pushes"] = s.dropped_pushes;
  DeviceIo::Stats device;  // CUDA arrays' transfers, over every GPU used
  for (const auto& [ordinal, io] : devices_) {
    DeviceIo::Stats one = io->stats();
    device.pushes += one.pushes;
    device.pulls += one.pulls;
    device.encoded_bytes += one.encoded_bytes;
    device.raw_bytes += one.raw_bytes;
    device.pulled_bytes += one.pulled_bytes;
    device.device_partitions += one.device_partitions;
  }
  d["device_pushes"] = device.pushes;
  d["device_pulls"] = device.pulls;
  d["device_encoded_bytes"] = device.encoded_bytes;
  d["device_raw_bytes"] = device.raw_bytes;
  d["device_pulled_bytes"] = device.pulled_bytes;
  d["device_encoded_partitions"] = device.device_partitions;
  return d;
}

void PyClient::Sweep() {
  std::erase_if(pending_, [](const std::shared_ptr<Pending>& p) { return p->Done(); });
}

size_t PyClient::pending() {
  Sweep();
  return pending_.size();
}

std::pair<int64_t, double> PyClient::NativeLoop(const std::string& op, const std::string& tensor,
                                                py::object array, double seconds) {
  const std::shared_ptr<Client> held = client();
  Client& c = *held;
  Borrowed memory(std::move(array), op == "pull", op.c_str());
  if (memory.on_device()) Raise(Status::InvalidArgument("native_loop takes host memory"));
  int64_t ops = 0;
  double elapsed = 0;
  Status s;
  {
    py::gil_scoped_release unlocked;
    auto start = std::chrono::steady_clock::now();
    while (s.ok() && elapsed < seconds) {
      Ticket t = op == "push" ? c.Push(tensor, memory.data(), memory.size())
                              : c.Pull(tensor, memory.data(), memory.size());
      s = t.Wait();
      ++ops;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  Check(s);
  return {ops, elapsed};
}

}  // namespace hetps
