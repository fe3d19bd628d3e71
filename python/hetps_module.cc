// hetps._hetps: the client library (<hetps/client.h>) for Python. The package hetps
// (python/hetps/__init__.py) re-exports everything here; hetps.torch builds on it. The classes
// are python/py_client.h's (the client and its tickets) and the run log's; this file binds them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hetps/client.h"
#include "python/py_attack.h"
#include "python/py_client.h"
#include "python/py_edge.h"
#include "python/py_errors.h"
#include "python/py_layers.h"
#include "python/py_secure.h"
#include "worker/train/run_log.h"
#include "worker/train/workload.h"

namespace py = pybind11;

namespace hetps {
namespace {

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

}  // namespace
}  // namespace hetps

PYBIND11_MODULE(_hetps, m) {
  using namespace hetps;
  m.doc() = "hetps: the parameter server's worker client (<hetps/client.h>) for Python.";
  AddExceptions(m);
  AddEdge(m);  // first: Client's link argument defaults to a hetps.Link
  AddAttack(m);
  AddSecure(m);
  AddLayers(m);

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
                    std::string, std::string, std::string, int64_t, int64_t, std::string,
                    const LinkOptions&, double, bool, bool>(),
           py::arg("scheduler") = "", py::arg("rank") = py::none(), py::arg("push_codec") = "none",
           py::arg("pull_codec") = "none", py::arg("heartbeat_interval_ms") = 500,
           py::arg("join_timeout_ms") = 60000, py::arg("server_recovery_timeout_ms") = 0,
           py::arg("auth") = "", py::arg("keys_dir") = "", py::arg("key_name") = "",
           py::arg("shared_memory_bytes") = ClientOptions{}.shared_memory_bytes,
           py::arg("batch_bytes") = ClientOptions{}.batch_bytes,
           py::arg("transport") = ClientOptions{}.transport, py::arg("link") = LinkOptions{},
           py::arg("device_slowdown") = 1.0, py::arg("virtual_clock") = false,
           py::arg("tier") = true,
           "Registers with the scheduler and blocks until the cluster view arrives. push_codec: "
           "one codec spec for every layer ('topk:density=0.01,ef=1') or per layer "
           "('default=topk:density=0.01;layer0=none'); pull_codec: 'none' or 'fp16'; rank: the "
           "rank to ask for (None: any free one, or $HETPS_RANK); transport: how large payloads "
           "to a co-located server skip its socket: 'cma' (the server reads and writes the "
           "arrays itself), 'shm' (a shared memory segment of shared_memory_bytes per server), "
           "'auto' (shm, else cma) or 'socket' (neither); batch_bytes: requests to one server "
           "smaller than this, sent together, go as one message (0: one message each); link: an "
           "emulated edge link (hetps.Link) this client's requests and replies go through; "
           "device_slowdown: the compute slowdown a federated client reports with its rounds; "
           "virtual_clock: the scheduler runs --clock=virtual and this client's round requests "
           "carry its virtual_time (docs/virtual-time.md); tier: push through the cluster's "
           "aggregator on this host, if it has one (docs/aggregation-tier.md).")
      .def_property(
          "virtual_time", [](PyClient& c) { return c.client()->virtual_time(); },
          [](PyClient& c, double t) { c.client()->SetVirtualTime(t); },
          "Under virtual_clock: the client's virtual clock in seconds; await_round and "
          "finish_round tell the scheduler it as their request's time, and each answer sets it "
          "to the time the scheduler answered at.")
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
          "Sends a gradient (float32, the tensor's size, C-contiguous; host or CUDA memory); "
          "the server applies its optimizer. weight: the samples behind it (weighting "
          "aggregators). Returns a Ticket.")
      .def(
          "pull",
          [](PyClient& c, const std::string& name, py::object out) {
            return c.Start("pull", name, std::move(out), 1.0);
          },
          py::arg("name"), py::arg("out"),
          "Fetches the tensor's current values into out (a writable float32 array or tensor "
          "of the tensor's size). Returns a Ticket; a CUDA out holds the values once it was "
          "waited (the copy is queued on its stream then).")
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
      .def(
          "declare_table",
          [](PyClient& c, const std::string& name, int64_t dim, int64_t max_rows,
             const std::string& eviction, int64_t min_count, double ttl_seconds, int64_t ttl_clocks,
             const std::string& init, double init_scale, uint64_t seed,
             const std::string& optimizer, int32_t layer) {
            c.DeclareTable(name,
                           TableOptions{.dim = dim,
                                        .max_rows = max_rows,
                                        .eviction = eviction,
                                        .min_count = min_count,
                                        .ttl_seconds = ttl_seconds,
                                        .ttl_clocks = ttl_clocks,
                                        .init = init,
                                        .init_scale = init_scale,
                                        .seed = seed,
                                        .optimizer = optimizer},
                           layer);
          },
          py::arg("name"), py::arg("dim"), py::arg("max_rows") = 0, py::arg("eviction") = "none",
          py::arg("min_count") = 0, py::arg("ttl_seconds") = 0.0, py::arg("ttl_clocks") = 0,
          py::arg("init") = "normal", py::arg("init_scale") = 0.01, py::arg("seed") = 0,
          py::arg("optimizer") = "", py::arg("layer") = 0,
          "Declares a sparse table of rows of dim float32 keyed by any 64-bit id; it joins the "
          "next declare() (call declare([]) for a model of tables only). max_rows per server "
          "with eviction lru, lfu or none; min_count: admission; ttl_seconds or ttl_clocks: "
          "expiry; init zeros, uniform or normal (init_scale); optimizer: the row-wise rule "
          "(empty: the servers' --optimizer). See docs/tables.md.")
      .def(
          "push_rows",
          [](PyClient& c, const std::string& name, py::object keys, py::object grads) {
            return c.StartRows("push_rows", name, std::move(keys), std::move(grads));
          },
          py::arg("name"), py::arg("keys"), py::arg("grads"),
          "Pushes gradient rows: keys (int64 or uint64, n) and grads (float32, n x dim). "
          "Repeated keys are summed. Returns a Ticket.")
      .def(
          "pull_rows",
          [](PyClient& c, const std::string& name, py::object keys, py::object out) {
            return c.StartRows("pull_rows", name, std::move(keys), std::move(out));
          },
          py::arg("name"), py::arg("keys"), py::arg("out"),
          "Pulls the rows of keys (int64 or uint64, n) into out (writable float32, n x dim); a "
          "key without a row reads its initializer's values. Returns a Ticket.")
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
      .def(
          "layer_schedule",
          [](PyClient& c) {
            const LayerPeriods s = c.client()->layer_schedule();
            py::dict d;
            d["spec"] = s.spec;
            d["periods"] = s.periods;
            d["mean"] = s.mean;
            return d;
          },
          "The scheduler's layer-wise push schedule as of its latest heartbeat reply: "
          "{'spec', 'periods' (per layer index; absent: 1), 'mean'}. Push layer l once every "
          "periods[l] steps with the gradients of the steps between summed in (their mean with "
          "'mean'); hetps.torch.DistributedOptimizer does.")
      .def(
          "report_layer",
          [](PyClient& c, int32_t layer, double grad_norm_sq, double weight_norm_sq,
             int64_t deferred_bytes) {
            c.client()->ReportLayer(layer, grad_norm_sq, weight_norm_sq, deferred_bytes);
          },
          py::arg("layer"), py::arg("grad_norm_sq"), py::arg("weight_norm_sq"),
          py::arg("deferred_bytes"),
          "One step of a layer for the scheduler's layer-wise schedule: its gradient's and "
          "weights' squared L2 norms (negative: not measured this step) and the raw bytes "
          "accumulated instead of pushed since joining.")
      .def(
          "set_device", [](PyClient& c, const std::string& d) { c.client()->SetDevice(d); },
          py::arg("device"),
          "What this worker computes on, e.g. 'cpu' or 'cuda:1', shown in `hetps status` "
          "(hetps.torch.DistributedOptimizer sets it from the model's parameters).")
      .def("barrier", &PyClient::Barrier, "Blocks until every live worker has called barrier().")
      .def_property_readonly(
          "runs_rounds", [](PyClient& c) { return c.client()->scheduler_runs_rounds(); },
          "Whether the scheduler runs federated rounds (servers with consistency selected or "
          "committed): a client then asks for work with await_round() instead of clocking.")
      .def("await_round", &PyClient::AwaitRound,
           "Federated rounds: blocks until the scheduler's selection picks this client and "
           "returns the round (current_clock becomes it, so the pushes that follow belong to "
           "it), or -1 once the run's rounds are done (then finish()).")
      .def("finish_round", &PyClient::FinishRound, py::arg("within_clip") = py::none(),
           py::arg("within_noisy") = py::none(), py::arg("within_masked") = py::none(),
           "After every push of the round was acknowledged: reports the upload; returns whether "
           "the round kept it (False: it closed without it and the servers drop it). Adaptive "
           "clipping's report of the update: within_clip (central DP): whether its norm before "
           "clipping was within round_clip; within_noisy (local DP): that bit centred (+-1/2) "
           "plus Gaussian noise of std round_count_noise; within_masked (distributed DP): the "
           "same with std round_count_noise / sqrt(K), as SecureUpload.mask_count's word.")
      .def_property_readonly(
          "round_secure", [](PyClient& c) { return !c.client()->round_secagg().empty(); },
          "Whether the round await_round returned is a secure one (--secure_aggregation): "
          "its upload goes through a hetps.SecureUpload.")
      .def_property_readonly(
          "round_clip", [](PyClient& c) { return c.client()->round_clip(); },
          "Adaptive clipping: the clip norm of the round await_round returned (0: the --dp "
          "spec's fixed clip).")
      .def_property_readonly(
          "round_update_noise", [](PyClient& c) { return c.client()->round_update_noise(); },
          "Adaptive clipping under local or distributed DP: the noise multiplier of the "
          "round's update (0: the --dp spec's).")
      .def_property_readonly(
          "round_count_noise", [](PyClient& c) { return c.client()->round_count_noise(); },
          "Adaptive clipping under local or distributed DP: the std of the noise on the "
          "round's bit (each client's under local DP, the sum's under distributed).")
      .def("await_rounds_closed", &PyClient::AwaitRoundsClosed, py::arg("rounds"),
           py::arg("measured") = py::none(),
           "Federated evaluators: blocks until `rounds` rounds (aggregations) have closed or the "
           "run is done; returns (closed, finished). measured: (round, loss, accuracy) of the "
           "evaluation made after the previous answer, for the scheduler's rounds log.")
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
