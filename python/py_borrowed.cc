#include "python/py_borrowed.h"

#include <string>

#include "python/py_errors.h"

namespace py = pybind11;

namespace hetps {

Borrowed::Borrowed(py::object obj, bool writable, const char* what, Kind kind) {
  if (!PyObject_CheckBuffer(obj.ptr()) && py::hasattr(obj, "numpy") &&
      py::hasattr(obj, "data_ptr")) {
    const std::string device = py::str(obj.attr("device").attr("type"));
    if (device != "cpu") {
      Raise(Status::InvalidArgument(std::string(what) + ": a tensor on " + device +
                                    " (only CPU tensors are passed without a copy)"));
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

Borrowed::~Borrowed() {
  if (owner_) PyBuffer_Release(&view_);
}

}  // namespace hetps
