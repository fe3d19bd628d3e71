// Builds without nvcc: the CUDA path reports itself unavailable.
#include "worker/train/model.h"

namespace hetps {

bool CudaUsable(std::string* why) {
  if (why) *why = "this build has no CUDA (nvcc was not found at configure time)";
  return false;
}

StatusOr<std::unique_ptr<Model>> MakeCudaModel(Architecture) {
  std::string why;
  CudaUsable(&why);
  return Status::FailedPrecondition("--device=cuda: " + why);
}

}  // namespace hetps
