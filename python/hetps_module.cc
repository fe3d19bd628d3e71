// hetps._hetps: the client library (<hetps/client.h>) for Python. The package hetps
// (python/hetps/__init__.py) re-exports everything here; hetps.torch builds on it.
//
// Arrays cross without copies: push/init send from the array's memory and pull writes into it,
// as hetps/client.h does with a pointer. The module holds the array (and its buffer export)
// until the ticket is done, also when the caller dropped the ticket, so the client's lifetime
// contract holds however the ticket is used. The GIL is released while joining, waiting,
// encoding and clocking, so other Python threads run meanwhile.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hetps/client.h"
#include "worker/train/run_log.h"

namespace py = pybind11;

namespace hetps {
namespace {

// Exception classes: hetps.Error, and one subclass per family of status codes.
struct Exceptions {
  py::object base;
  std::map<StatusCode, py::object> by_code;
};
Exceptions& Errors() {
  static auto* e = new Exceptions();  // lives as long as the interpreter
  return *e;
}

[[noreturn]] void Raise(const Status& s) {
  auto it = Errors().by_code.find(s.code());
  py::object cls = it != Errors().by_code.end() ? it->second : Errors().base;
  py::object error = cls(s.ToString());
  error.attr("code") = StatusCodeName(s.code());
  error.attr("message") = s.message();
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

// A float32 buffer borrowed from a Python object: a numpy array (any C-contiguous float32
// buffer) or a CPU torch tensor (through its numpy view, which shares its memory).
class Borrowed {
 public:
  Borrowed(py::object obj, bool writable, const char* what) {
    if (!PyObject_CheckBuffer(obj.ptr()) && py::hasattr(obj, "numpy") &&
        py::hasattr(obj, "data_ptr")) {
      const std::string device = py::str(obj.attr("device").attr("type"));
      if (device != "cpu") {
        Raise(Status::InvalidArgument(std::string(what) + ": a tensor on " + device +
                                      " (only CPU tensors are passed without a copy)"));
      }
      obj = obj.attr("detach")().attr("numpy")();
    }
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      PyErr_Clear();
      Raise(Status::InvalidArgument(
          std::string(what) + ": needs a C-contiguous float32 numpy array or CPU torch tensor" +
          (writable ? " that can be written" : "") + ", got " +
          std::string(py::str(py::type::of(obj)))));
    }
    owner_ = std::move(obj);
    const std::string format = view_.format ? view_.format : "B";
    if (view_.itemsize != 4 || (format != "f" && format != "<f" && format != "=f")) {
      PyBuffer_Release(&view_);
      owner_ = py::object();
      Raise(Status::DtypeMismatch(std::string(what) + ": float32 needed, got format '" + format +
                                  "'"));
    }
  }
  ~Borrowed() {
    if (owner_) PyBuffer_Release(&view_);  // REQUIRES: the GIL (held wherever these die)
  }
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;

  float* data() const { return static_cast<float*>(view_.buf); }
  int64_t size() const { return view_.len / 4; }

 private:
  Py_buffer view_{};
  py::object owner_;
};

// One operation in flight: its ticket and the memory it uses.
struct Pending {
  Ticket ticket;
  std::vector<std::unique_ptr<Borrowed>> memory;  // one array, or each of a many-tensor call
  std::string op, tensor;
  int64_t data_ptr = 0;
};

class PyTicket {
 public:
  explicit PyTicket(std::shared_ptr<Pending> p) : p_(std::move(p)) {}
  void Wait() {
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = p_->ticket.Wait();
    }
    Check(s);
  }
  bool Done() const { return p_->ticket.Done(); }
  int64_t data_ptr() const { return p_->data_ptr; }
  std::string Repr() const {
    return "<hetps.Ticket " + p_->op + " '" + p_->tensor + "' " + (Done() ? "done" : "in flight") +
           ">";
  }

 private:
  std::shared_ptr<Pending> p_;
};

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

class PyClient {
 public:
  PyClient(std::string scheduler, std::optional<int> rank, std::string push_codec,
           std::string pull_codec, int heartbeat_interval_ms, int join_timeout_ms,
           int server_recovery_timeout_ms, std::string auth, std::string keys_dir,
           std::string key_name, int64_t shared_memory_bytes, int64_t batch_bytes,
           std::string transport) {
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

  // A client dropped without finish() leaves the cluster here: the transfers in flight end
  // before the arrays they use are released.
  ~PyClient() {
    if (client_) {
      py::gil_scoped_release unlocked;
      client_.reset();  // no other thread can be inside a call: each holds the Python object
    }
    pending_.clear();
  }
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  // The client, held by the caller for the length of its call: finish() (or another thread's
  // last reference) cannot free it while this thread uses it with the GIL released.
  std::shared_ptr<Client> client() {
    if (!client_) Raise(Status::FailedPrecondition("the client has finished"));
    return client_;
  }

  void Declare(const py::iterable& tensors) {
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

  PyTicket Start(const std::string& op, const std::string& tensor, py::object array,
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
    {
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

  // push_all / pull_all: many (name, array) pairs, or a dict of them, in one call and one
  // Ticket (their small partitions share messages). Every array is checked before anything is
  // sent.
  PyTicket StartMany(const std::string& op, py::object tensors, double weight) {
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
    {
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

  void Clock() {
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

  void Barrier() {
    const std::shared_ptr<Client> held = client();
    Client& c = *held;
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = c.Barrier();
    }
    Check(s);
  }

  // Other threads still inside a call keep their reference: their calls end at once
  // (FailedPrecondition) and the last of them frees the client.
  void Finish() {
    if (!client_) return;
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

  void ReportMetrics(const std::map<std::string, double>& metrics) {
    client()->ReportMetrics(metrics);
  }

  py::dict Stats() {
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
    return d;
  }

  // Releases the memory of the operations that are done (the GIL is held).
  void Sweep() {
    std::erase_if(pending_, [](const std::shared_ptr<Pending>& p) { return p->ticket.Done(); });
  }
  size_t pending() {
    Sweep();
    return pending_.size();
  }

  // The benchmark's reference: `op` ("push" or "pull") of `array` repeated from C++ for
  // `seconds`, each waited, through this same client; returns (operations, seconds).
  std::pair<int64_t, double> NativeLoop(const std::string& op, const std::string& tensor,
                                        py::object array, double seconds) {
    const std::shared_ptr<Client> held = client();
    Client& c = *held;
    Borrowed memory(std::move(array), op == "pull", op.c_str());
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

 private:
  std::shared_ptr<Client> client_;
  std::vector<std::shared_ptr<Pending>> pending_;
};

class PyRunLog {
 public:
  PyRunLog(const std::string& dir, int rank) {
    auto log = RunLog::Open(dir, rank);
    Check(log.status());
    log_ = std::make_unique<RunLog>(std::move(*log));
  }
  void Record(int64_t clock, int rank, double loss, std::optional<double> accuracy,
              int64_t staleness) {
    log_->Record(clock, rank, loss, accuracy, staleness);
  }
  void Close() { log_->Close(); }

 private:
  std::unique_ptr<RunLog> log_;
};

void AddExceptions(py::module_& m) {
  auto make = [&](const char* name, PyObject* base, const char* doc) {
    PyObject* bases = PyTuple_Pack(2, Errors().base.ptr(), base);
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewExceptionWithDoc((std::string("hetps.") + name).c_str(), doc, bases, nullptr));
    Py_DECREF(bases);
    m.attr(name) = cls;
    return cls;
  };
  Errors().base = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "hetps.Error",
      "An error from hetps: .code is the Status code's name (e.g. 'SIZE_MISMATCH'), .message "
      "its message.",
      PyExc_RuntimeError, nullptr));
  m.attr("Error") = Errors().base;
  py::object invalid = make("InvalidArgument", PyExc_ValueError,
                            "INVALID_ARGUMENT, SIZE_MISMATCH, DTYPE_MISMATCH or MALFORMED.");
  py::object not_found = make("NotFound", PyExc_LookupError, "NOT_FOUND: e.g. an unknown tensor.");
  py::object unavailable = make("Unavailable", PyExc_ConnectionError,
                                "UNAVAILABLE: a dead server or scheduler, a full queue.");
  py::object precondition =
      make("FailedPrecondition", PyExc_RuntimeError,
           "FAILED_PRECONDITION or UNREGISTERED: e.g. a push before declare().");
  py::object aborted = make("Aborted", PyExc_RuntimeError, "ABORTED: e.g. the cluster shut down.");
  py::object deadline =
      make("DeadlineExceeded", PyExc_TimeoutError, "DEADLINE_EXCEEDED: e.g. joining timed out.");
  py::object denied =
      make("PermissionDenied", PyExc_PermissionError, "PERMISSION_DENIED: this key may not.");
  py::object internal = make("Internal", PyExc_RuntimeError, "INTERNAL.");
  auto& by = Errors().by_code;
  by[StatusCode::kInvalidArgument] = by[StatusCode::kSizeMismatch] =
      by[StatusCode::kDtypeMismatch] = by[StatusCode::kMalformed] = invalid;
  by[StatusCode::kNotFound] = not_found;
  by[StatusCode::kUnavailable] = unavailable;
  by[StatusCode::kFailedPrecondition] = by[StatusCode::kUnregistered] = precondition;
  by[StatusCode::kAborted] = aborted;
  by[StatusCode::kDeadlineExceeded] = deadline;
  by[StatusCode::kPermissionDenied] = denied;
  by[StatusCode::kInternal] = internal;
}

}  // namespace
}  // namespace hetps

PYBIND11_MODULE(_hetps, m) {
  using namespace hetps;
  m.doc() = "hetps: the parameter server's worker client (<hetps/client.h>) for Python.";
  AddExceptions(m);

  py::class_<PyTicket>(m, "Ticket",
                       "An asynchronous push, pull or init. The array it uses is held by hetps "
                       "until the ticket is done, even if this object is dropped.")
      .def("wait", &PyTicket::Wait,
           "Blocks (without the GIL) until the operation is done; raises its first error.")
      .def("done", &PyTicket::Done,
           "Whether the operation is done (servers answered every "
           "partition and the array is no longer used).")
      .def_property_readonly("data_ptr", &PyTicket::data_ptr,
                             "The address the client sends from or writes to: the array's own "
                             "memory (no copy).")
      .def("__repr__", &PyTicket::Repr);

  py::class_<PyClient>(
      m, "Client",
      "A worker of a hetps cluster: joins the scheduler's cluster on construction (blocks until "
      "the cluster forms).\n\n"
      "  with hetps.Client('tcp://127.0.0.1:7000') as c:\n"
      "      c.declare([('fc1.w', (784, 256), 0), ('fc1.b', (256,), 0)])  # collective\n"
      "      c.pull('fc1.w', w).wait()        # w: float32 numpy array or CPU torch tensor\n"
      "      c.push('fc1.w', grad).wait()     # the server applies its optimizer\n"
      "      c.clock()                        # end of one iteration\n\n"
      "push, pull and init return Tickets at once; the transfer runs on the client's I/O "
      "thread, all partitions in flight together, from and into the array's own memory (no "
      "copies). An array passed to push/init must not be modified until its ticket is done; "
      "an array passed to pull holds unspecified values until then. Errors raise hetps.Error "
      "subclasses (hetps.InvalidArgument, hetps.NotFound, hetps.Unavailable, ...) carrying "
      ".code and .message. scheduler and rank default to $HETPS_SCHEDULER and $HETPS_RANK "
      "(set by hetps launch), auth/keys_dir/key_name to $HETPS_AUTH/$HETPS_KEYS/$HETPS_KEY.")
      .def(py::init<std::string, std::optional<int>, std::string, std::string, int, int, int,
                    std::string, std::string, std::string, int64_t, int64_t, std::string>(),
           py::arg("scheduler") = "", py::arg("rank") = py::none(), py::arg("push_codec") = "none",
           py::arg("pull_codec") = "none", py::arg("heartbeat_interval_ms") = 500,
           py::arg("join_timeout_ms") = 60000, py::arg("server_recovery_timeout_ms") = 0,
           py::arg("auth") = "", py::arg("keys_dir") = "", py::arg("key_name") = "",
           py::arg("shared_memory_bytes") = ClientOptions{}.shared_memory_bytes,
           py::arg("batch_bytes") = ClientOptions{}.batch_bytes,
           py::arg("transport") = ClientOptions{}.transport,
           "Registers with the scheduler and blocks until the cluster view arrives. push_codec: "
           "one codec spec for every layer ('topk:density=0.01,ef=1') or per layer "
           "('default=topk:density=0.01;layer0=none'); pull_codec: 'none' or 'fp16'; rank: the "
           "rank to ask for (None: any free one, or $HETPS_RANK); transport: how large payloads "
           "to a co-located server skip its socket: 'cma' (the server reads and writes the "
           "arrays itself), 'shm' (a shared memory segment of shared_memory_bytes per server), "
           "'auto' (shm, else cma) or 'socket' (neither); batch_bytes: requests to one server "
           "smaller than this, sent together, go as one message (0: one message each).")
      .def_property_readonly(
          "id", [](PyClient& c) { return c.client()->id(); }, "Node id assigned by the scheduler.")
      .def_property_readonly("rank", [](PyClient& c) { return c.client()->rank(); })
      .def_property_readonly(
          "num_workers", [](PyClient& c) { return c.client()->num_workers(); },
          "The workers the cluster formed with.")
      .def_property_readonly("num_servers", [](PyClient& c) { return c.client()->num_servers(); })
      .def_property_readonly(
          "consistency", [](PyClient& c) { return c.client()->consistency(); },
          "The servers' consistency spec when this worker joined.")
      .def_property_readonly(
          "current_clock", [](PyClient& c) { return c.client()->clock(); },
          "This worker's clock: iterations ended by clock().")
      .def("declare", &PyClient::Declare, py::arg("tensors"),
           "Declares the tensors this worker uses: an iterable of (name, shape) or (name, "
           "shape, layer) tuples, or dicts with those keys. Collective: returns once every live "
           "worker has declared. Redeclaring a tensor with another shape raises.")
      .def(
          "push",
          [](PyClient& c, const std::string& name, py::object array, double weight) {
            return c.Start("push", name, std::move(array), weight);
          },
          py::arg("name"), py::arg("array"), py::arg("weight") = 1.0,
          "Sends a gradient (float32, the tensor's size, C-contiguous); the server applies its "
          "optimizer. weight: the samples behind it (weighting aggregators). Returns a Ticket.")
      .def(
          "pull",
          [](PyClient& c, const std::string& name, py::object out) {
            return c.Start("pull", name, std::move(out), 1.0);
          },
          py::arg("name"), py::arg("out"),
          "Fetches the tensor's current values into out (a writable float32 array or CPU "
          "tensor of the tensor's size). Returns a Ticket.")
      .def(
          "push_all",
          [](PyClient& c, py::object tensors, double weight) {
            return c.StartMany("push", std::move(tensors), weight);
          },
          py::arg("tensors"), py::arg("weight") = 1.0,
          "Pushes many gradients in one call: a dict {name: array} or an iterable of (name, "
          "array) pairs, each as push() takes it. One Ticket for all; their small partitions "
          "share messages (batch_bytes). An unknown name or a wrong size fails the ticket and "
          "sends none of them.")
      .def(
          "pull_all",
          [](PyClient& c, py::object tensors) {
            return c.StartMany("pull", std::move(tensors), 1.0);
          },
          py::arg("tensors"),
          "Pulls many tensors in one call: a dict {name: out} or an iterable of (name, out) "
          "pairs, each as pull() takes it. One Ticket for all.")
      .def(
          "init",
          [](PyClient& c, const std::string& name, py::object values) {
            return c.Start("init", name, std::move(values), 1.0);
          },
          py::arg("name"), py::arg("values"),
          "Offers initial values; the first init of each partition wins (servers run with "
          "--init=worker). Returns a Ticket.")
      .def("clock", &PyClient::Clock,
           "Ends this worker's iteration: tells every server, then advances current_clock.")
      .def(
          "begin_iteration", [](PyClient& c) { c.client()->BeginIteration(); },
          "Optional: marks the start of an iteration, so that evaluation or logging between "
          "clock() and this call is not counted as iteration time (straggler detection).")
      .def(
          "set_loss", [](PyClient& c, double loss) { c.client()->SetLoss(loss); }, py::arg("loss"),
          "The training loss of the minibatch behind the gradients pushed next, carried on every "
          "push until set again (nan: none); servers with --aggregator=sum:compensation=lcasgd "
          "predict each worker's loss from it.")
      .def("barrier", &PyClient::Barrier, "Blocks until every live worker has called barrier().")
      .def("finish", &PyClient::Finish,
           "Waits for every pending ticket and leaves the cluster; idempotent.")
      .def("report_metrics", &PyClient::ReportMetrics, py::arg("metrics"),
           "Figures for the scheduler's status and dashboard, e.g. {'loss': 0.3, 'accuracy': "
           "0.87}, tagged with the current clock.")
      .def("stats", &PyClient::Stats,
           "A dict of this client's counters: bytes_pushed, raw_bytes_pushed, bytes_pulled, "
           "requests, messages, shared_memory_bytes, reads, max_staleness, mean_staleness, pushes, "
           "max_push_staleness, "
           "mean_push_staleness, dropped_pushes.")
      .def_property_readonly("pending", &PyClient::pending,
                             "Operations whose arrays hetps still holds (not yet done).")
      .def("__enter__", [](PyClient& c) -> PyClient& { return c; })
      .def("__exit__", [](PyClient& c, py::args) { c.Finish(); })
      .def("_native_loop", &PyClient::NativeLoop, py::arg("op"), py::arg("name"), py::arg("array"),
           py::arg("seconds"),
           "Benchmark reference: op ('push' or 'pull') repeated from C++ through this client "
           "for `seconds`, each waited; returns (operations, seconds).");

  py::class_<PyRunLog>(m, "RunLog",
                       "A training run's folder, as the C++ trainer writes it: each worker "
                       "appends to <dir>/worker-<rank>.csv.")
      .def(py::init<const std::string&, int>(), py::arg("dir"), py::arg("rank"))
      .def("record", &PyRunLog::Record, py::arg("clock"), py::arg("rank"), py::arg("loss"),
           py::arg("accuracy") = py::none(), py::arg("staleness") = 0)
      .def("close", &PyRunLog::Close);

  m.def(
      "finish_run",
      [](const std::string& dir, double test_accuracy, double wall_s, int64_t iterations,
         int workers, int64_t samples, const std::string& consistency, const std::string& device) {
        RunSummary s;
        s.accuracy = test_accuracy;
        s.wall_s = wall_s;
        s.iterations = iterations;
        s.workers = workers;
        s.samples = samples;
        s.consistency = consistency;
        s.device = device;
        Check(FinishRun(dir, s));
      },
      py::arg("dir"), py::arg("test_accuracy"), py::arg("wall_s"), py::arg("iterations"),
      py::arg("workers"), py::arg("samples"), py::arg("consistency"), py::arg("device") = "cpu",
      "Rank 0, after every worker closed its RunLog and passed a barrier: merges the workers' "
      "files into metrics.csv, writes summary.json and plot.png.");
}
