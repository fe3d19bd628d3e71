// Builds without nvcc: the CUDA path reports itself unavailable.
#include "worker/compress/gpu_codec.h"
#include "worker/train/model.h"

namespace hetps {

bool CudaUsable(std::string* why) { return compress::gpu::Usable(why); }

StatusOr<std::unique_ptr<Model>> MakeCudaModel(Architecture, int) {
  std::string why;
  CudaUsable(&why);
  return Status::FailedPrecondition("--device=cuda: " + why);
}

}  // namespace hetps
