// hetps.Attacker and hetps.is_byzantine (python/hetps_module.cc binds them): the C++ edge
// clients' emulated Byzantine clients (worker/edge/attack.h) for Python federated clients.
#pragma once

#include <pybind11/pybind11.h>

namespace hetps {

void AddAttack(pybind11::module_& m);

}  // namespace hetps
