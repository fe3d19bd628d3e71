#include "python/py_attack.h"

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
