// hetps.SecureUpload (python/hetps_module.cc binds it): a Python federated client's side of a
// secure-aggregation round (worker/secure_aggregation.h), over the hetps.Client it belongs to.
#pragma once

#include <pybind11/pybind11.h>

namespace hetps {

void AddSecure(pybind11::module_& m);

}  // namespace hetps
