// Arrays from Python without copies: the float32 memory of a numpy array (any C-contiguous
// float32 buffer) or of a CPU torch tensor, held (with its buffer export) for as long as a
// transfer may read or write it.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

namespace hetps {

// A float32 buffer borrowed from a Python object: a numpy array (any C-contiguous float32
// buffer) or a CPU torch tensor (through its numpy view, which shares its memory). Or, for a
// table's keys, a buffer of 64-bit integers (int64 or uint64; an int64 key is its bits).
class Borrowed {
 public:
  enum class Kind { kFloat32, kInt64 };
  // Raises hetps.InvalidArgument (not such a buffer, not writable when `writable`, a tensor
  // on a device) or hetps.DtypeMismatch, naming `what`.
  Borrowed(pybind11::object obj, bool writable, const char* what, Kind kind = Kind::kFloat32);
  ~Borrowed();  // REQUIRES: the GIL (held wherever these die)
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;

  float* data() const { return static_cast<float*>(view_.buf); }
  const uint64_t* keys() const { return static_cast<const uint64_t*>(view_.buf); }
  int64_t size() const { return view_.len / view_.itemsize; }  // elements

 private:
  Py_buffer view_{};
  pybind11::object owner_;
};

}  // namespace hetps
