// hetps.Error and its subclasses: a Status raised as the Python exception of its family, with
// .code (the status code's name) and .message.
#pragma once

#include <pybind11/pybind11.h>

#include "hetps/status.h"

namespace hetps {

// Raises `s` as its exception class. REQUIRES: AddExceptions ran; the GIL.
[[noreturn]] void Raise(const Status& s);
// Raises `s` unless it is ok.
void Check(const Status& s);
// Defines hetps.Error and its subclasses in `m`.
void AddExceptions(pybind11::module_& m);

}  // namespace hetps
