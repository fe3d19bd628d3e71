// Pushes from and pulls into CUDA device memory through a Client: what the Python module does
// with CUDA tensors (and arrays exposing __cuda_array_interface__).
//
// A push returns at once: it records an event on the producer's stream (the one the gradient
// was computed on), and this object's own thread, once the event has passed, encodes each
// partition on the device with the codec's CUDA twin (worker/compress/gpu_codec.h, residuals on
// the device; codecs without a twin go through the host) so that only the encoded bytes cross
// to the host, or, for raw partitions, copies the tensor once, device to pinned host memory,
// asynchronously on its stream, and pushes from there without another copy. So a push made in
// a backward hook overlaps with the rest of the backward pass.
//
// A pull lands in pinned host memory; Handle::Wait then queues the copy to the device on the
// consumer's stream and returns: kernels queued on that stream afterwards see the values. A
// pulled device tensor holds the values only once its Handle was waited.
//
// Operations run in the order they were started (one thread), so a pull started after a push
// is sent after it, as the host path does. Pinned buffers are pooled per size and reused once
// their copies have completed.
//
// Builds without CUDA (Create fails with FAILED_PRECONDITION saying why).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "hetps/client.h"

namespace hetps {

class DeviceIo {
 public:
  // float32 device memory of a declared tensor.
  struct Tensor {
    std::string name;
    float* data = nullptr;
    int64_t n = 0;
  };

  struct Op;  // one call's state (the CUDA build defines it)
  // An operation in flight; copyable, shares the operation.
  class Handle {
   public:
    Handle() = default;
    explicit Handle(std::shared_ptr<Op> op) : op_(std::move(op)) {}
    // Blocks until the operation's transfers are done and returns its first error; for a
    // pull, then queues the copies to the device on the consumer's stream (once).
    Status Wait() const;
    // Whether Wait would not block.
    bool Done() const;

   private:
    std::shared_ptr<Op> op_;
  };

  // Figures for stats() and the benchmark.
  struct Stats {
    int64_t pushes = 0, pulls = 0;
    int64_t encoded_bytes = 0;      // bytes the device encoders handed to the client
    int64_t raw_bytes = 0;          // raw float32 bytes copied device to host for pushes and inits
    int64_t pulled_bytes = 0;       // bytes copied host to device for pulls
    int64_t device_partitions = 0;  // partitions encoded by a CUDA twin
  };

  // Whether `p` is device memory (unified or mapped pointers count as device memory); its
  // device ordinal, or FAILED_PRECONDITION without CUDA or for host memory.
  static StatusOr<int> DeviceOf(const void* p);

  // `client` must outlive this object. REQUIRES: a usable GPU with ordinal `device`.
  static StatusOr<std::unique_ptr<DeviceIo>> Create(std::shared_ptr<Client> client, int device);
  virtual ~DeviceIo() = default;  // finishes the operations already started

  // `stream`: the producer's (push, init) or consumer's (pull) cudaStream_t as an integer; 0
  // is the legacy default stream. The tensors' memory must stay valid (and, for pushes,
  // unchanged) until the Handle is done.
  virtual Handle Push(std::vector<Tensor> tensors, double weight, uintptr_t stream) = 0;
  virtual Handle Init(std::vector<Tensor> tensors, uintptr_t stream) = 0;
  virtual Handle Pull(std::vector<Tensor> tensors, uintptr_t stream) = 0;

  virtual Stats stats() const = 0;
  virtual int device() const = 0;
};

}  // namespace hetps
