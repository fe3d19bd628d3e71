// DeviceIo without CUDA: nothing is device memory.
#include "worker/compress/gpu_codec.h"
#include "worker/device_io.h"

namespace hetps {

struct DeviceIo::Op {};

Status DeviceIo::Handle::Wait() const { return Status(); }
bool DeviceIo::Handle::Done() const { return true; }

StatusOr<int> DeviceIo::DeviceOf(const void*) {
  std::string why;
  compress::gpu::Usable(&why);
  return Status::FailedPrecondition(why);
}

StatusOr<std::unique_ptr<DeviceIo>> DeviceIo::Create(std::shared_ptr<Client>, int) {
  std::string why;
  compress::gpu::Usable(&why);
  return Status::FailedPrecondition(why);
}

}  // namespace hetps
