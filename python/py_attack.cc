#include "python/py_attack.h"

#include <fmt/format.h>
#include <pybind11/numpy.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "python/py_borrowed.h"
#include "python/py_errors.h"
#include "worker/edge/attack.h"

namespace py = pybind11;

namespace hetps {
namespace {

// A Byzantine client's attack and its seeded stream, kept across its rounds as the C++ client
// keeps them, so that a Python client of the same rank uploads what a C++ one would.
class PyAttacker {
 public:
  PyAttacker(const std::string& spec, uint64_t seed, int rank) : spec_(spec) {
    auto attack = MakeAttack(spec);
    Check(attack.status());
    attack_ = std::move(*attack);
    rng_.seed(seed * 31337 + static_cast<uint64_t>(rank));  // the C++ client's attack stream
  }

  // Poisons the update (a list of float32 arrays, one per tensor) in place.
  void PoisonUpdate(const py::list& arrays) {
    std::vector<std::unique_ptr<Borrowed>> held;
    std::vector<std::vector<float>> update;
    for (py::handle a : arrays) {
      held.push_back(
          std::make_unique<Borrowed>(py::reinterpret_borrow<py::object>(a), true, "poison_update"));
      if (held.back()->on_device()) {
        Raise(Status::InvalidArgument("poison_update: arrays in host memory"));
      }
      update.emplace_back(held.back()->data(), held.back()->data() + held.back()->size());
    }
    attack_->PoisonUpdate(update, rng_);
    for (size_t t = 0; t < update.size(); ++t) {
      std::copy(update[t].begin(), update[t].end(), held[t]->data());
    }
  }

  // The labels a client of this attack trains on (label_flip changes them; the others keep
  // them), as a new int64 array.
  py::array_t<int64_t> PoisonLabels(
      const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& labels,
      int32_t classes) {
    if (classes < 1) Raise(Status::InvalidArgument("poison_labels: classes must be >= 1"));
    std::vector<int32_t> y(static_cast<size_t>(labels.size()));
    for (size_t i = 0; i < y.size(); ++i) {
      const int64_t v = labels.data()[i];
      if (v < 0 || v >= classes) {
        Raise(Status::InvalidArgument(
            fmt::format("poison_labels: label {} at {} is outside 0..{}", v, i, classes - 1)));
      }
      y[i] = static_cast<int32_t>(v);
    }
    attack_->PoisonLabels(classes, y);
    py::array_t<int64_t> out(static_cast<py::ssize_t>(y.size()));
    std::copy(y.begin(), y.end(), out.mutable_data());
    return out;
  }

  // Whether the attack changes a client's labels (probed: every class once).
  bool ChangesLabels() const {
    constexpr int32_t kClasses = 4;
    std::vector<int32_t> y(kClasses);
    for (int32_t c = 0; c < kClasses; ++c) y[c] = c;
    const std::vector<int32_t> before = y;
    attack_->PoisonLabels(kClasses, y);
    return y != before;
  }

  const std::string& spec() const { return spec_; }

 private:
  std::string spec_;
  std::unique_ptr<Attack> attack_;
  std::mt19937_64 rng_;
};

}  // namespace

void AddAttack(py::module_& m) {
  py::class_<PyAttacker>(m, "Attacker",
                         "An emulated Byzantine client's attack (worker/edge/attack.h; "
                         "--attack), seeded as a C++ edge client of the same rank and "
                         "--data_seed is.")
      .def(py::init<const std::string&, uint64_t, int>(), py::arg("spec"), py::arg("seed"),
           py::arg("rank"))
      .def("poison_update", &PyAttacker::PoisonUpdate, py::arg("arrays"),
           "Replaces the update (a list of writable float32 arrays, one per tensor) in place "
           "with what the attack uploads.")
      .def("poison_labels", &PyAttacker::PoisonLabels, py::arg("labels"), py::arg("classes"),
           "The labels (integers in 0..classes-1) this attacker trains on, as a new int64 array: "
           "changed by label_flip (y -> classes-1-y), unchanged by the update attacks.")
      .def_property_readonly("changes_labels", &PyAttacker::ChangesLabels,
                             "Whether the attack changes the client's labels (label_flip).")
      .def_property_readonly("spec", &PyAttacker::spec);
  m.def(
      "is_byzantine",
      [](double fraction, uint64_t seed, int client, int clients) {
        Check(ValidateAttackFlags(fraction, "sign_flip"));
        return IsByzantine(fraction, seed, client, clients);
      },
      py::arg("fraction"), py::arg("seed"), py::arg("client"), py::arg("clients"),
      "Whether training client `client` (0 .. clients-1) of a scenario seeded `seed` is one of "
      "its round(fraction x clients) attackers, as the C++ edge clients decide it.");
  m.def(
      "check_attack",
      [](double fraction, const std::string& attack) {
        Check(ValidateAttackFlags(fraction, attack));
      },
      py::arg("fraction"), py::arg("attack"),
      "Raises InvalidArgument for a fraction outside [0, 1] or a bad --attack spec.");
}

}  // namespace hetps
