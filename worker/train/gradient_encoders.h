// Push encoders for gradients that stay where the model computed them (Client::PushEncoded):
// each partition is encoded in that memory, by the partition's codec, with its error-feedback
// residual kept there too; only the encoded bytes reach the client.
//
// Device memory: the CUDA twin of the codec (worker/compress/gpu_codec.h), byte-identical to
// the CPU codec, residual (and dgc's accumulation) on the device; powersgd, which has no twin,
// and raw partitions are copied to the host first (powersgd's residual stays on the host). Host
// memory: the CPU codecs, which is what Client::Push does itself; it is the reference the
// device encoders are tested against and lets the plumbing be tested without a GPU.
//
// Thread-safety: none; one pushing thread (the trainer's) uses an instance.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "hetps/client.h"

namespace hetps {

class GradientEncoders {
 public:
  virtual ~GradientEncoders() = default;
  // Encodes the slice of the gradient at `grad` (the whole tensor, in this object's memory)
  // that `slice` names, as Client::PushEncoded asks.
  virtual Status Encode(const Client::PartitionSlice& slice, const float* grad,
                        std::vector<uint8_t>& out) = 0;
  // The encoder to give Client::PushEncoded for the tensor gradient at `grad`.
  Client::PartitionEncoder For(const float* grad) {
    return [this, grad](const Client::PartitionSlice& slice, std::vector<uint8_t>& out) {
      return Encode(slice, grad, out);
    };
  }
  // The error-feedback residual of a partition, on the host (empty: none, or never encoded).
  virtual StatusOr<std::vector<float>> Residual(int32_t partition) = 0;
  // How many partitions were encoded on the device (0 for host encoders).
  virtual int64_t device_partitions() const = 0;
};

std::unique_ptr<GradientEncoders> MakeHostEncoders();
// REQUIRES a usable GPU (FAILED_PRECONDITION otherwise).
StatusOr<std::unique_ptr<GradientEncoders>> MakeDeviceEncoders();

}  // namespace hetps
