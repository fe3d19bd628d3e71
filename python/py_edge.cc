#include "python/py_edge.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/privacy.h"
#include "python/py_errors.h"
#include "worker/edge/availability.h"
#include "worker/edge/edge_profile.h"
#include "worker/edge/virtual_round.h"
#include "worker/link_shaper.h"
#include "worker/train/workload.h"

namespace py = pybind11;

namespace hetps {
namespace {

using Flags = std::map<std::string, std::string>;

// flags[name] as a number into `out`, when given; a value that is no number raises.
template <typename T>
void Read(const Flags& flags, const std::string& name, T& out) {
  const auto it = flags.find(name);
  if (it == flags.end()) return;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used == it->second.size()) {
      out = static_cast<T>(v);
      return;
    }
  } catch (const std::exception&) {
  }
  Raise(Status::InvalidArgument(fmt::format("--{} needs a number, got '{}'", name, it->second)));
}

EdgeProfileFlags ProfileFlags(const Flags& f) {
  EdgeProfileFlags p;
  Read(f, "slowdown", p.slowdown);
  Read(f, "device_spread", p.device_spread);
  Read(f, "device_gflops", p.device_gflops);
  if (auto it = f.find("device_table"); it != f.end()) p.device_table = it->second;
  Read(f, "data_seed", p.data_seed);
  Read(f, "link_up_mbps", p.link_up_mbps);
  Read(f, "link_down_mbps", p.link_down_mbps);
  Read(f, "link_latency_ms", p.link_latency_ms);
  Read(f, "link_jitter_ms", p.link_jitter_ms);
  Read(f, "link_loss", p.link_loss);
  Read(f, "link_rto_ms", p.link_rto_ms);
  Read(f, "link_seed", p.link_seed);
  Read(f, "link_spread", p.link_spread);
  Read(f, "evaluators", p.evaluators);
  if (auto it = f.find("link_table"); it != f.end()) p.link_table = it->second;
  if (auto it = f.find("links"); it != f.end()) p.links = it->second;
  return p;
}

std::string LinkRepr(const LinkOptions& l) {
  if (!l.enabled()) return "<hetps.Link none>";
  return fmt::format(
      "<hetps.Link up {:.3g} Mbit/s, down {:.3g} Mbit/s, {:g} ms each way, jitter {:g} ms, loss "
      "{:g}{}>",
      l.up_mbps, l.down_mbps, l.latency_ms, l.jitter_ms, l.loss,
      l.outside ? ", by the network namespace" : "");
}

void AddLink(py::module_& m) {
  py::class_<LinkOptions>(m, "Link",
                          "An emulated edge link between a client and the servers (hetps/link.h): "
                          "bandwidth each way (0: unlimited), one-way latency with jitter, packet "
                          "loss with a retransmission timeout, seeded.")
      .def(py::init<>())
      .def_readwrite("up_mbps", &LinkOptions::up_mbps)
      .def_readwrite("down_mbps", &LinkOptions::down_mbps)
      .def_readwrite("latency_ms", &LinkOptions::latency_ms)
      .def_readwrite("jitter_ms", &LinkOptions::jitter_ms)
      .def_readwrite("loss", &LinkOptions::loss)
      .def_readwrite("rto_ms", &LinkOptions::rto_ms)
      .def_readwrite("seed", &LinkOptions::seed)
      .def_readwrite("outside", &LinkOptions::outside,
                     "Applied by the client's network namespace (--links=netns), not here.")
      .def_property_readonly("enabled", &LinkOptions::enabled)
      .def("__repr__", &LinkRepr);
}

void AddAvailability(py::module_& m) {
  py::class_<Availability>(m, "Availability",
                           "When an edge client is reachable (worker/edge/availability.h); time "
                           "is seconds since the client started.")
      .def("next_online", &Availability::NextOnline, py::arg("t"),
           "The first time >= t at which the client is online.")
      .def("online_throughout", &Availability::OnlineThroughout, py::arg("start"), py::arg("end"),
           "Whether it stays online throughout [start, end].");
  m.def(
      "make_availability",
      [](const std::string& spec, uint64_t seed, int client) {
        auto made = MakeAvailability(spec, seed, client);
        Check(made.status());
        return std::move(*made);
      },
      py::arg("spec"), py::arg("seed"), py::arg("client") = 0,
      "The availability process of --availability=SPEC for training client `client`, seeded "
      "as the C++ edge client seeds it.");
}

void AddVirtualRound(py::module_& m) {
  py::class_<VirtualRound>(m, "VirtualRound",
                           "How long an edge client's round takes in virtual time "
                           "(worker/edge/virtual_round.h): its link (the shaper on the virtual "
                           "clock, seeded as the link says) and its device model.")
      .def(py::init([](const LinkOptions& link, double flops_per_sample, double gflops,
                       double slowdown) {
             if (!(flops_per_sample > 0) || !(gflops > 0) || !(slowdown >= 1)) {
               throw py::value_error(
                   "VirtualRound needs flops_per_sample > 0, gflops > 0 and slowdown >= 1");
             }
             return VirtualRound(link, flops_per_sample, gflops, slowdown);
           }),
           py::arg("link"), py::arg("flops_per_sample"), py::arg("gflops"), py::arg("slowdown"))
      .def("download", &VirtualRound::Download, py::arg("t"), py::arg("bytes"),
           "When the global model of `bytes`, asked for at t, has arrived.")
      .def("compute", &VirtualRound::Compute, py::arg("t"), py::arg("samples"),
           "When training on `samples` samples (every epoch's) started at t ends.")
      .def("upload", &VirtualRound::Upload, py::arg("t"), py::arg("bytes"),
           "When the delta of `bytes`, sent at t, is acknowledged.");
}

void AddPartition(py::module_& m) {
  m.def(
      "split_samples",
      [](const std::vector<int32_t>& labels, int classes, int parts, const std::string& scheme,
         double alpha, int shards_per_client, uint64_t seed) {
        if (scheme != "iid" && scheme != "dirichlet" && scheme != "shards") {
          throw py::value_error("unknown partition '" + scheme + "' (iid, dirichlet, shards)");
        }
        if (parts < 1 || classes < 1 || shards_per_client < 1 || !(alpha > 0)) {
          throw py::value_error("parts, classes and shards_per_client must be >= 1, alpha > 0");
        }
        for (int32_t y : labels) {
          if (y < 0 || y >= classes) throw py::value_error("a label outside [0, classes)");
        }
        WorkloadOptions o;
        o.partition = scheme;
        o.dirichlet_alpha = alpha;
        o.shards_per_client = shards_per_client;
        o.seed = seed;
        py::gil_scoped_release unlocked;
        return SplitSamples(o, labels, classes, parts);
      },
      py::arg("labels"), py::arg("classes"), py::arg("parts"), py::arg("scheme") = "iid",
      py::arg("alpha") = 0.5, py::arg("shards_per_client") = 2, py::arg("seed") = 1,
      "The C++ edge clients' split of sample positions into `parts` (iid, dirichlet with alpha, "
      "or shards of one label), seeded: the same partition a C++ client of the same rank and "
      "--data_seed trains on.");
}

}  // namespace

void AddEdge(py::module_& m) {
  AddLink(m);
  AddAvailability(m);
  AddVirtualRound(m);
  AddPartition(m);
  m.def(
      "edge_profile",
      [](const Flags& flags, int rank) {
        const EdgeProfileFlags f = ProfileFlags(flags);
        Check(ValidateEdgeProfileFlags(f));
        auto link = EdgeLink(f, rank);
        Check(link.status());
        Check(ValidateLinkOptions(*link));
        return std::make_pair(*link, EdgeSlowdown(f, rank));
      },
      py::arg("flags"), py::arg("rank"),
      "(Link, slowdown) of edge client `rank` from a scenario's flags ({name: value}, the "
      "names of hetps-worker's --slowdown, --device_spread, --device_table, --data_seed, "
      "--link_*, --links, --evaluators; others are ignored), drawn as hetps-worker draws them.");
  m.def(
      "parse_privacy",
      [](const std::string& spec) {
        auto p = ParsePrivacy(spec);
        Check(p.status());
        return py::make_tuple(p->name(), p->clip, p->noise, p->delta);
      },
      py::arg("spec"),
      "(mode, clip, noise, delta) of a --dp spec (common/privacy.h); a bad one raises "
      "InvalidArgument naming the problem.");
  m.def(
      "edge_device",
      [](const Flags& flags, int rank) {
        const EdgeProfileFlags f = ProfileFlags(flags);
        Check(ValidateEdgeProfileFlags(f));
        return std::make_pair(EdgeDeviceName(f, rank), EdgeReferenceGflops(f));
      },
      py::arg("flags"), py::arg("rank"),
      "(kind, reference GFLOP/s) of edge client `rank`: the --device_table row it drew ('' "
      "without a table) and the reference device's rate (--device_gflops, or the table's "
      "fastest); the client computes at that rate over its slowdown.");
}

}  // namespace hetps
