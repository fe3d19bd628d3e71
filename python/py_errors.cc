#include "python/py_errors.h"

#include <map>
#include <string>

namespace py = pybind11;

namespace hetps {
namespace {

// Exception classes: hetps.Error, and one subclass per family of status codes.
struct Exceptions {
  py::object base;
  std::map<StatusCode, py::object> by_code;
};
Exceptions& Errors() {
  static auto* e = new Exceptions();  // lives as long as the interpreter
  return *e;
}

}  // namespace

void Raise(const Status& s) {
  auto it = Errors().by_code.find(s.code());
  py::object cls = it != Errors().by_code.end() ? it->second : Errors().base;
  py::object error = cls(s.ToString());
  error.attr("code") = StatusCodeName(s.code());
  error.attr("message") = s.message();
  PyErr_SetObject(cls.ptr(), error.ptr());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

void AddExceptions(py::module_& m) {
  auto make = [&](const char* name, PyObject* base, const char* doc) {
    PyObject* bases = PyTuple_Pack(2, Errors().base.ptr(), base);
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewExceptionWithDoc((std::string("hetps.") + name).c_str(), doc, bases, nullptr));
    Py_DECREF(bases);
    m.attr(name) = cls;
    return cls;
  };
  Errors().base = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "hetps.Error",
      "An error from hetps: .code is the Status code's name (e.g. 'SIZE_MISMATCH'), .message "
      "its message.",
      PyExc_RuntimeError, nullptr));
  m.attr("Error") = Errors().base;
  py::object invalid = make("InvalidArgument", PyExc_ValueError,
                            "INVALID_ARGUMENT, SIZE_MISMATCH, DTYPE_MISMATCH or MALFORMED.");
  py::object not_found = make("NotFound", PyExc_LookupError, "NOT_FOUND: e.g. an unknown tensor.");
  py::object unavailable = make("Unavailable", PyExc_ConnectionError,
                                "UNAVAILABLE: a dead server or scheduler, a full queue.");
  py::object precondition =
      make("FailedPrecondition", PyExc_RuntimeError,
           "FAILED_PRECONDITION or UNREGISTERED: e.g. a push before declare().");
  py::object aborted = make("Aborted", PyExc_RuntimeError, "ABORTED: e.g. the cluster shut down.");
  py::object deadline =
      make("DeadlineExceeded", PyExc_TimeoutError, "DEADLINE_EXCEEDED: e.g. joining timed out.");
  py::object denied =
      make("PermissionDenied", PyExc_PermissionError, "PERMISSION_DENIED: this key may not.");
  py::object internal = make("Internal", PyExc_RuntimeError, "INTERNAL.");
  auto& by = Errors().by_code;
  by[StatusCode::kInvalidArgument] = by[StatusCode::kSizeMismatch] =
      by[StatusCode::kDtypeMismatch] = by[StatusCode::kMalformed] = invalid;
  by[StatusCode::kNotFound] = not_found;
  by[StatusCode::kUnavailable] = unavailable;
  by[StatusCode::kFailedPrecondition] = by[StatusCode::kUnregistered] = precondition;
  by[StatusCode::kAborted] = aborted;
  by[StatusCode::kDeadlineExceeded] = deadline;
  by[StatusCode::kPermissionDenied] = denied;
  by[StatusCode::kInternal] = internal;
}

}  // namespace hetps
