#include "python/py_layers.h"

#include <fmt/format.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <utility>
#include <vector>

#include "hetps/client.h"
#include "hetps/layer_accumulator.h"
#include "python/py_client.h"

namespace py = pybind11;

namespace hetps {
namespace {

using Array = py::array_t<float, py::array::c_style>;

// A writable C-contiguous float32 array of tensor t's size, or ValueError.
size_t Index(const LayerAccumulator& acc, size_t t) {
  if (t >= acc.size()) throw py::value_error(fmt::format("no tensor {} (of {})", t, acc.size()));
  return t;
}

float* Checked(const LayerAccumulator& acc, size_t t, py::array& array) {
  Index(acc, t);
  if (!py::isinstance<Array>(array) || !(array.flags() & py::array::c_style) ||
      !array.writeable()) {
    throw py::value_error("a writable C-contiguous float32 array is needed");
  }
  if (array.size() != acc.elements(t)) {
    throw py::value_error(
        fmt::format("tensor {} has {} elements, the array {}", t, acc.elements(t), array.size()));
  }
  return static_cast<float*>(array.mutable_data());
}

LayerPeriods PeriodsOf(const py::dict& d) {
  LayerPeriods p;
  if (d.contains("spec")) p.spec = d["spec"].cast<std::string>();
  if (d.contains("periods")) p.periods = d["periods"].cast<std::vector<int32_t>>();
  if (d.contains("mean")) p.mean = d["mean"].cast<bool>();
  return p;
}

}  // namespace

void AddLayers(py::module_& m) {
  py::class_<LayerAccumulator>(
      m, "LayerAccumulator",
      "The scheduler's layer-wise push schedule on a worker (docs/layer-schedules.md): "
      "LayerAccumulator([(layer, elements), ...]); each step begin_step(client.layer_schedule()), "
      "then per tensor offer(t, grad): False, grad was added to the tensor's sum (its layer is "
      "not due); True, the sum was added into grad (divided by the steps with 'mean'): push it. "
      "report(client) sends the step's figures to the scheduler.")
      .def(py::init([](const std::vector<std::pair<int32_t, int64_t>>& tensors) {
             std::vector<LayerAccumulator::Tensor> t;
             for (const auto& [layer, n] : tensors) {
               if (n < 0) throw py::value_error("a tensor's elements must be >= 0");
               t.push_back({layer, n});
             }
             return LayerAccumulator(std::move(t));
           }),
           py::arg("tensors"))
      .def(
          "begin_step", [](LayerAccumulator& a, const py::dict& s) { a.BeginStep(PeriodsOf(s)); },
          py::arg("schedule"))
      .def(
          "due", [](const LayerAccumulator& a, size_t t) { return a.Due(Index(a, t)); },
          py::arg("tensor"))
      .def(
          "steps", [](const LayerAccumulator& a, size_t t) { return a.Steps(Index(a, t)); },
          py::arg("tensor"))
      .def(
          "offer",
          [](LayerAccumulator& a, size_t t, py::array grad) {
            return a.Offer(t, Checked(a, t, grad));
          },
          py::arg("tensor"), py::arg("grad"))
      .def(
          "measure",
          [](LayerAccumulator& a, size_t t, py::array grad, py::array weights) {
            a.Measure(t, Checked(a, t, grad), Checked(a, t, weights));
          },
          py::arg("tensor"), py::arg("grad"), py::arg("weights"))
      .def(
          "report", [](LayerAccumulator& a, PyClient& c) { a.Report(*c.client()); },
          py::arg("client"))
      .def("deferred_bytes", py::overload_cast<>(&LayerAccumulator::deferred_bytes, py::const_));
}

}  // namespace hetps
