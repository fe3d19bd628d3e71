// Arrays from Python without copies: the float32 memory of a numpy array (any C-contiguous
// float32 buffer), of a CPU torch tensor, or of device memory (a CUDA torch tensor, or any
// C-contiguous float32 array exposing __cuda_array_interface__: CuPy, Numba), held (with its
// buffer export) for as long as a transfer may read or write it.
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
  // Raises hetps.InvalidArgument (not such a buffer, not writable when `writable`, device
  // memory where `kind` is kInt64 or this build has no CUDA) or hetps.DtypeMismatch, naming
  // `what`.
  Borrowed(pybind11::object obj, bool writable, const char* what, Kind kind = Kind::kFloat32);
  ~Borrowed();  // REQUIRES: the GIL (held wherever these die)
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;

  float* data() const { return on_device_ ? device_data_ : static_cast<float*>(view_.buf); }
  const uint64_t* keys() const { return static_cast<const uint64_t*>(view_.buf); }
  int64_t size() const { return on_device_ ? device_size_ : view_.len / view_.itemsize; }

  // Device memory: its GPU and the stream its producer (or consumer) works on, as an integer
  // cudaStream_t (0: the default stream; a torch tensor's is torch's current stream).
  bool on_device() const { return on_device_; }
  int device() const { return device_; }
  uintptr_t stream() const { return stream_; }

 private:
  void BorrowDevice(pybind11::object obj, bool writable, const char* what, bool torch);

  Py_buffer view_{};
  pybind11::object owner_;
  bool on_device_ = false;
  float* device_data_ = nullptr;
  int64_t device_size_ = 0;
  int device_ = -1;
  uintptr_t stream_ = 0;
};

}  // namespace hetps
