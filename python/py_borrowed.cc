#include "python/py_borrowed.h"

#include <string>

#include "python/py_errors.h"
#include "worker/device_io.h"

namespace py = pybind11;

namespace hetps {

Borrowed::Borrowed(py::object obj, bool writable, const char* what, Kind kind) {
  const bool torch =
      !PyObject_CheckBuffer(obj.ptr()) && py::hasattr(obj, "numpy") && py::hasattr(obj, "data_ptr");
  const std::string device = torch ? std::string(py::str(obj.attr("device").attr("type"))) : "";
  if ((torch && device == "cuda") || (!torch && py::hasattr(obj, "__cuda_array_interface__"))) {
    if (kind != Kind::kFloat32) {
      Raise(Status::InvalidArgument(std::string(what) + ": keys must be in host memory"));
    }
    BorrowDevice(std::move(obj), writable, what, torch);
    return;
  }
  if (torch) {
    if (device != "cpu") {
      Raise(Status::InvalidArgument(std::string(what) + ": a tensor on " + device +
                                    " (CPU and CUDA tensors are passed without a copy)"));
    }
    obj = obj.attr("detach")().attr("numpy")();
  }
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
    PyErr_Clear();
    const char* type = kind == Kind::kFloat32 ? "float32" : "int64";
    Raise(Status::InvalidArgument(std::string(what) + ": needs a C-contiguous " + type +
                                  " numpy array or CPU torch tensor" +
                                  (writable ? " that can be written" : "") + ", got " +
                                  std::string(py::str(py::type::of(obj)))));
  }
  owner_ = std::move(obj);
  std::string format = view_.format ? view_.format : "B";
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) {
    format = format.substr(1);
  }
  const bool ok = kind == Kind::kFloat32
                      ? view_.itemsize == 4 && format == "f"
                      : view_.itemsize == 8 && format.size() == 1 &&
                            std::string("qQlL").find(format[0]) != std::string::npos;
  if (!ok) {
    PyBuffer_Release(&view_);
    owner_ = py::object();
    Raise(Status::DtypeMismatch(std::string(what) + ": " +
                                (kind == Kind::kFloat32 ? "float32" : "int64 or uint64") +
                                " needed, got format '" + format + "'"));
  }
}

void Borrowed::BorrowDevice(py::object obj, bool writable, const char* what, bool torch) {
  const std::string name(what);
  py::object array = torch ? obj.attr("detach")() : obj;
  auto cai = py::cast<py::dict>(array.attr("__cuda_array_interface__"));
  const std::string type = py::cast<std::string>(cai["typestr"]);
  if (type != "<f4" && type != "=f4" && type != "|f4") {
    Raise(Status::DtypeMismatch(name + ": float32 needed, got device array of '" + type + "'"));
  }
  auto shape = py::cast<std::vector<int64_t>>(cai["shape"]);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (cai.contains("strides") && !cai["strides"].is_none() && n > 1) {
    auto strides = py::cast<std::vector<int64_t>>(cai["strides"]);
    int64_t want = sizeof(float);
    for (size_t i = shape.size(); i-- > 0;) {
      if (shape[i] > 1 && strides[i] != want) {
        Raise(Status::InvalidArgument(name + ": needs a C-contiguous device array"));
      }
      want *= shape[i];
    }
  }
  auto data = py::cast<py::tuple>(cai["data"]);
  if (writable && py::cast<bool>(data[1])) {
    Raise(Status::InvalidArgument(name + ": a read-only device array cannot be written"));
  }
  device_data_ = reinterpret_cast<float*>(py::cast<uintptr_t>(data[0]));
  device_size_ = n;
  auto ordinal = DeviceIo::DeviceOf(device_data_);
  if (n > 0 && !ordinal.ok()) {
    Raise(Status::InvalidArgument(
        name + ": device memory this module cannot use: " + ordinal.status().message()));
  }
  device_ = ordinal.ok() ? *ordinal : 0;
  if (torch) {  // the stream torch queues this tensor's work on
    py::object cuda = py::module_::import("torch").attr("cuda");
    stream_ =
        py::cast<uintptr_t>(cuda.attr("current_stream")(obj.attr("device")).attr("cuda_stream"));
  } else if (cai.contains("stream") && !cai["stream"].is_none()) {
    stream_ = py::cast<uintptr_t>(cai["stream"]);  // 1 and 2 are CUDA's legacy and per-thread
  }
  on_device_ = true;
  owner_ = std::move(array);
}

Borrowed::~Borrowed() {
  if (owner_ && !on_device_) PyBuffer_Release(&view_);
}

}  // namespace hetps
