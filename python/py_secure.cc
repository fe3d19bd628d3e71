#include "python/py_secure.h"

#include <pybind11/numpy.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "python/py_borrowed.h"
#include "python/py_client.h"
#include "python/py_errors.h"
#include "worker/secure_aggregation.h"

namespace py = pybind11;

namespace hetps {
namespace {

// The round the client's last AwaitRound or FinishRound answer describes (its secure part).
std::optional<proto::SecAgg> RoundPart(Client& c) {
  if (c.round_secagg().empty()) return std::nullopt;
  proto::SecAgg part;
  if (!part.ParseFromString(c.round_secagg())) {
    Raise(Status::Malformed("the scheduler's secure round parameters do not parse"));
  }
  return part;
}

// One client's secure rounds, as the C++ edge client runs them: setup once selected (before
// or after training), the update masked tensor by tensor into the words it pushes, the
// unmasking the scheduler asks for once the round closed.
class PySecureUpload {
 public:
  explicit PySecureUpload(PyClient& c) : client_(c.client()) {
    upload_ = std::make_unique<SecureUpload>(
        client_->id(), [c = client_](const proto::SecAgg& request) -> StatusOr<proto::SecAgg> {
          auto answer = c->ExchangeSecAgg(request.SerializeAsString());
          if (!answer.ok()) return answer.status();
          proto::SecAgg a;
          if (!a.ParseFromString(*answer)) {
            return Status::Malformed("a SECAGG answer that does not parse");
          }
          return a;
        });
  }

  // Phases 0 and 1 for the round the last await_round returned; raises when this client cannot
  // take part (a dropout: the round goes on without it).
  void Setup(double weight) {
    auto task = RoundPart(*client_);
    if (!task) Raise(Status::FailedPrecondition("the round await_round returned is not secure"));
    kept_ = task->kept();
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = upload_->Setup(*task, weight);
    }
    if (!s.ok()) upload_->Reset();
    Check(s);
  }

  // The masked fixed-point words of `update` (the whole float32 tensor `tensor`), as a float32
  // array to push (its elements are words, never read as floats).
  py::array_t<float> Mask(const std::string& tensor, py::object update) {
    if (!upload_->ready()) Raise(Status::FailedPrecondition("mask before setup"));
    Borrowed x(std::move(update), false, "mask");
    if (x.on_device()) Raise(Status::InvalidArgument("mask: an update in host memory"));
    const int32_t id = client_->shard_map().TensorId(tensor);
    if (id < 0) Raise(Status::NotFound("unknown tensor '" + tensor + "'"));
    if (client_->shard_map().tensors()[id].NumElements() != x.size()) {
      Raise(Status::SizeMismatch("mask: '" + tensor + "' has another size"));
    }
    py::array_t<float> out(x.size());
    auto* words = reinterpret_cast<uint32_t*>(out.mutable_data());
    {
      py::gil_scoped_release unlocked;
      upload_->Mask(id, 0, x.data(), x.size(), words);
    }
    return out;
  }

  // Adaptive clipping under distributed DP: the noised centred bit `value` as its masked word
  // (for finish_round's within_masked), in the fixed point of the round's count noise.
  uint32_t MaskCount(double value) const {
    if (!upload_->ready()) Raise(Status::FailedPrecondition("mask_count before setup"));
    if (!std::isfinite(value)) Raise(Status::InvalidArgument("mask_count: a finite value"));
    return upload_->MaskCount(value, secagg::CountFixedPoint(client_->round_count_noise(), kept_));
  }

  // After finish_round: reveals what its answer asks for (`kept`: whether the round kept this
  // client's upload), then forgets the round. Returns whether there was a request.
  bool Unmask(bool kept) {
    auto request = RoundPart(*client_);
    Status s;
    bool asked = request && request->phase() == proto::SecAgg::UNMASK;
    if (asked) {
      py::gil_scoped_release unlocked;
      s = upload_->Unmask(*request, kept);
    }
    upload_->Reset();
    Check(s);
    return asked;
  }

  void Reset() { upload_->Reset(); }
  bool ready() const { return upload_->ready(); }
  int kept() const { return kept_; }
  int64_t bytes() const { return upload_->bytes(); }
  double cpu_s() const { return upload_->cpu_s(); }

 private:
  std::shared_ptr<Client> client_;
  std::unique_ptr<SecureUpload> upload_;
  int kept_ = 1;
};

}  // namespace

void AddSecure(py::module_& m) {
  py::class_<PySecureUpload>(
      m, "SecureUpload",
      "A federated client's side of secure aggregation (--secure_aggregation; "
      "docs/secure-aggregation.md), over its hetps.Client: setup(weight) once selected for a "
      "secure round (client.round_secure), mask(name, update) for each tensor's words to push, "
      "finish_round, then unmask(kept).")
      .def(py::init<PyClient&>(), py::arg("client"), py::keep_alive<1, 2>())
      .def("setup", &PySecureUpload::Setup, py::arg("weight"),
           "Phases 0 and 1: advertises fresh keys and the upload's weight, shares the secrets "
           "with the neighbours. Raises when this client cannot take part (the round goes on "
           "without it; report the round with finish_round and upload nothing).")
      .def("mask", &PySecureUpload::Mask, py::arg("name"), py::arg("update"),
           "The masked fixed-point words of a whole tensor's update (float32), to push in its "
           "place with the weight given to setup.")
      .def("mask_count", &PySecureUpload::MaskCount, py::arg("value"),
           "Adaptive clipping under distributed DP: the noised centred bit (+-1/2 plus Gaussian "
           "noise of std client.round_count_noise / sqrt(kept)) as its masked word, for "
           "finish_round(within_masked=...).")
      .def("unmask", &PySecureUpload::Unmask, py::arg("kept"),
           "After finish_round: reveals what the scheduler asked for, then forgets the round.")
      .def("reset", &PySecureUpload::Reset)
      .def_property_readonly("ready", &PySecureUpload::ready)
      .def_property_readonly("kept", &PySecureUpload::kept,
                             "The round's K (the uploads it keeps): distributed DP's divisor.")
      .def_property_readonly("bytes", &PySecureUpload::bytes,
                             "Bytes of this client's SECAGG requests and answers so far.")
      .def_property_readonly("cpu_s", &PySecureUpload::cpu_s,
                             "Seconds of CPU in setup, mask and unmask so far.");
}

}  // namespace hetps
