// DeviceIo with CUDA (compiled when nvcc exists): one thread per device runs the operations in
// order; pinned buffers are pooled.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "common/compress/codec.h"
#include "worker/compress/gpu_codec.h"
#include "worker/device_io.h"
#include "worker/train/gradient_encoders.h"

namespace hetps {
namespace {

Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status();
  (void)cudaGetLastError();  // not sticky: the next call starts clean
  return Status::Internal(fmt::format("CUDA {}: {}", what, cudaGetErrorString(e)));
}

// The calling thread's current device, set to `device` for the guard's length.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    (void)cudaGetDevice(&previous_);
    if (previous_ != device) (void)cudaSetDevice(device);
  }
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

}  // namespace

// Named, not anonymous: DeviceIo::Op (external linkage) holds these.
namespace device_io {

// Pinned host memory for one transfer; reusable once nobody holds it and the copy recorded on
// `free_after` (if any) has completed.
struct Pinned {
  float* p = nullptr;
  int64_t n = 0;
  cudaEvent_t free_after = nullptr;
  std::atomic<bool> recorded{false};
  ~Pinned() {
    if (free_after) (void)cudaEventDestroy(free_after);
    if (p) (void)cudaFreeHost(p);
  }
};

class PinnedPool {
 public:
  StatusOr<std::shared_ptr<Pinned>> Take(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& b : pool_) {
      if (b->n == n && Free(b)) return b;
    }
    if (pool_.size() >= kMaxBuffers) {  // drop free buffers of other sizes
      std::erase_if(pool_, [](const std::shared_ptr<Pinned>& b) { return Free(b); });
    }
    auto b = std::make_shared<Pinned>();
    void* p = nullptr;
    if (Status s = CudaStatus(cudaMallocHost(&p, std::max<int64_t>(n, 1) * sizeof(float)),
                              "cudaMallocHost");
        !s.ok()) {
      return s;
    }
    b->p = static_cast<float*>(p);
    b->n = n;
    if (Status s = CudaStatus(cudaEventCreateWithFlags(&b->free_after, cudaEventDisableTiming),
                              "cudaEventCreate");
        !s.ok()) {
      return s;
    }
    pool_.push_back(b);
    return b;
  }

 private:
  static constexpr size_t kMaxBuffers = 256;
  static bool Free(const std::shared_ptr<Pinned>& b) {
    return b.use_count() == 1 &&
           (!b->recorded.load() || cudaEventQuery(b->free_after) == cudaSuccess);
  }
  std::mutex mu_;
  std::vector<std::shared_ptr<Pinned>> pool_;
};

}  // namespace device_io

struct DeviceIo::Op {
  std::mutex mu;
  std::condition_variable cv;
  bool submitted = false;
  Status status;                // an error before or while the transfers were started
  std::vector<Ticket> tickets;  // set once, when submitted
  // Pulls: the copies to the device, queued on `stream` at the first Wait.
  struct Copy {
    float* device;
    std::shared_ptr<device_io::Pinned> host;
    int64_t n;
  };
  std::vector<Copy> copies;
  bool copied = false;
  std::vector<std::shared_ptr<device_io::Pinned>> held;  // pushes: the pinned memory sent from
  cudaEvent_t ready = nullptr;                           // pushes: the producer's work so far
  uintptr_t stream = 0;
  int device = 0;
  // The DeviceIo's count, shared: a handle may be waited after its DeviceIo is gone.
  std::shared_ptr<std::atomic<int64_t>> pulled_bytes;

  ~Op() {
    if (ready) (void)cudaEventDestroy(ready);
  }
  void Submit(Status s, std::vector<Ticket> t) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    tickets = std::move(t);
    submitted = true;
    cv.notify_all();
  }
  bool TicketsDone() const {  // REQUIRES: submitted
    return std::all_of(tickets.begin(), tickets.end(), [](const Ticket& t) { return t.Done(); });
  }
};

Status DeviceIo::Handle::Wait() const {
  if (!op_) return Status();
  Op& op = *op_;
  {
    std::unique_lock<std::mutex> lock(op.mu);
    op.cv.wait(lock, [&] { return op.submitted; });
    if (!op.status.ok()) return op.status;
  }
  for (const Ticket& t : op.tickets) {
    if (Status s = t.Wait(); !s.ok()) return s;
  }
  std::lock_guard<std::mutex> lock(op.mu);
  if (op.copied || op.copies.empty()) return Status();
  op.copied = true;
  DeviceGuard guard(op.device);
  auto stream = reinterpret_cast<cudaStream_t>(op.stream);
  for (Op::Copy& c : op.copies) {
    const size_t bytes = static_cast<size_t>(c.n) * sizeof(float);
    if (Status s =
            CudaStatus(cudaMemcpyAsync(c.device, c.host->p, bytes, cudaMemcpyHostToDevice, stream),
                       "copying a pull to the device");
        !s.ok()) {
      return s;
    }
    if (Status s = CudaStatus(cudaEventRecord(c.host->free_after, stream), "cudaEventRecord");
        !s.ok()) {
      return s;
    }
    c.host->recorded = true;
    *op.pulled_bytes += static_cast<int64_t>(bytes);
  }
  return Status();
}

bool DeviceIo::Handle::Done() const {
  if (!op_) return true;
  std::lock_guard<std::mutex> lock(op_->mu);
  return op_->submitted && (!op_->status.ok() || op_->TicketsDone());
}

StatusOr<int> DeviceIo::DeviceOf(const void* p) {
  std::string why;
  if (!compress::gpu::Usable(&why)) return Status::FailedPrecondition(why);
  cudaPointerAttributes a{};
  if (Status s = CudaStatus(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes"); !s.ok()) {
    return s;
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
    return Status::FailedPrecondition("not device memory");
  }
  return a.device;
}

namespace {

class CudaDeviceIo : public DeviceIo {
 public:
  CudaDeviceIo(std::shared_ptr<Client> client, int device)
      : client_(std::move(client)), device_(device), thread_([this] { Loop(); }) {}

  ~CudaDeviceIo() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    thread_.join();
    for (const auto& op : inflight_) {  // every one was submitted: the client reads their memory
      for (const Ticket& t : op->tickets) (void)t.Wait();
    }
    inflight_.clear();
  }

  Handle Push(std::vector<Tensor> tensors, double weight, uintptr_t stream) override {
    return Start(Kind::kPush, std::move(tensors), weight, stream);
  }
  Handle Init(std::vector<Tensor> tensors, uintptr_t stream) override {
    return Start(Kind::kInit, std::move(tensors), 0, stream);
  }
  Handle Pull(std::vector<Tensor> tensors, uintptr_t stream) override {
    return Start(Kind::kPull, std::move(tensors), 0, stream);
  }

  Stats stats() const override {
    Stats s;
    s.pushes = pushes_;
    s.pulls = pulls_;
    s.encoded_bytes = encoded_bytes_;
    s.raw_bytes = raw_bytes_;
    s.pulled_bytes = *pulled_bytes_;
    s.device_partitions = device_partitions_;
    return s;
  }
  int device() const override { return device_; }

  // The thread's start: its device and stream; when either failed, every operation fails with
  // the reason.
  Status Setup() {
    if (Status s = CudaStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
    return CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                      "cudaStreamCreate");
  }

 private:
  enum class Kind { kPush, kInit, kPull };

  Handle Start(Kind kind, std::vector<Tensor> tensors, double weight, uintptr_t stream) {
    auto op = std::make_shared<Op>();
    op->device = device_;
    op->stream = stream;
    op->pulled_bytes = pulled_bytes_;
    if (kind != Kind::kPull) {  // the producer's work queued so far: the gradient's kernels
      DeviceGuard guard(device_);
      Status s = CudaStatus(cudaEventCreateWithFlags(&op->ready, cudaEventDisableTiming),
                            "cudaEventCreate");
      if (s.ok()) {
        s = CudaStatus(cudaEventRecord(op->ready, reinterpret_cast<cudaStream_t>(stream)),
                       "recording the producer's stream");
      }
      if (!s.ok()) {
        op->Submit(s, {});
        return Handle(op);
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(inflight_, [](const std::shared_ptr<Op>& o) { return Handle(o).Done(); });
    inflight_.push_back(op);
    queue_.push_back([this, kind, op, tensors = std::move(tensors), weight] {
      Status s = setup_;
      if (s.ok())
        s = kind == Kind::kPull ? StartPull(*op, tensors) : StartPush(*op, tensors, weight, kind);
      if (!s.ok()) op->Submit(s, {});
    });
    cv_.notify_all();
    return Handle(op);
  }

  void Loop() {
    setup_ = Setup();
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping, and everything started has run
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
    if (stream_) (void)cudaStreamDestroy(stream_);
  }

  // Waits for the producer, then encodes on the device or copies raw tensors to pinned memory.
  Status StartPush(Op& op, const std::vector<Tensor>& tensors, double weight, Kind kind) {
    if (Status s = CudaStatus(cudaEventSynchronize(op.ready), "waiting for the producer's stream");
        !s.ok()) {
      return s;
    }
    std::vector<Ticket> tickets;
    std::vector<Client::ConstTensorView> raw;
    for (const Tensor& t : tensors) {
      bool is_raw = kind == Kind::kInit;
      if (!is_raw) {
        auto codec = client_->PushCodecOf(t.name);
        if (!codec.ok()) return codec.status();
        auto spec = compress::ParseCodecSpec(*codec);
        if (!spec.ok()) return spec.status();
        is_raw = spec->name == "none";
      }
      if (!is_raw) {
        if (Status s = Encoders(); !s.ok()) return s;
        const Client::PartitionEncoder encode = encoders_->For(t.data);
        auto counted = [&](const Client::PartitionSlice& slice, std::vector<uint8_t>& out) {
          Status s = encode(slice, out);
          encoded_bytes_ += static_cast<int64_t>(out.size());
          return s;
        };
        tickets.push_back(client_->PushEncoded(t.name, t.n, counted, weight));
        device_partitions_ = encoders_->device_partitions();
        continue;
      }
      auto buffer = pool_.Take(t.n);
      if (!buffer.ok()) return buffer.status();
      const size_t bytes = static_cast<size_t>(t.n) * sizeof(float);
      if (Status s = CudaStatus(
              cudaMemcpyAsync((*buffer)->p, t.data, bytes, cudaMemcpyDeviceToHost, stream_),
              "copying a push to the host");
          !s.ok()) {
        return s;
      }
      raw_bytes_ += static_cast<int64_t>(bytes);
      op.held.push_back(*buffer);
      raw.push_back({t.name, (*buffer)->p, t.n});
    }
    if (!raw.empty()) {
      if (Status s = CudaStatus(cudaStreamSynchronize(stream_), "copying pushes to the host");
          !s.ok()) {
        return s;
      }
      if (kind == Kind::kPush) {
        tickets.push_back(client_->Push(raw, weight));
      } else {
        for (const auto& v : raw) tickets.push_back(client_->Init(v.tensor, v.data, v.n));
      }
    }
    if (kind == Kind::kPush) ++pushes_;
    op.Submit(Status(), std::move(tickets));
    return Status();
  }

  Status StartPull(Op& op, const std::vector<Tensor>& tensors) {
    std::vector<Client::TensorView> views;
    for (const Tensor& t : tensors) {
      auto buffer = pool_.Take(t.n);
      if (!buffer.ok()) return buffer.status();
      views.push_back({t.name, (*buffer)->p, t.n});
      op.copies.push_back({t.data, *buffer, t.n});
    }
    ++pulls_;
    op.Submit(Status(), {client_->Pull(views)});
    return Status();
  }

  Status Encoders() {
    if (encoders_) return Status();
    auto made = MakeDeviceEncoders();
    if (!made.ok()) return made.status();
    encoders_ = std::move(*made);
    return Status();
  }

  const std::shared_ptr<Client> client_;
  const int device_;
  device_io::PinnedPool pool_;
  cudaStream_t stream_ = nullptr;  // the thread's copies
  Status setup_;
  std::unique_ptr<GradientEncoders> encoders_;  // the thread's
  std::atomic<int64_t> pushes_{0}, pulls_{0}, encoded_bytes_{0}, raw_bytes_{0},
      device_partitions_{0};
  const std::shared_ptr<std::atomic<int64_t>> pulled_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::deque<std::function<void()>> queue_;
  std::vector<std::shared_ptr<Op>> inflight_;  // kept until done: the client reads their memory
  std::thread thread_;                         // last: starts once the members above exist
};

}  // namespace

StatusOr<std::unique_ptr<DeviceIo>> DeviceIo::Create(std::shared_ptr<Client> client, int device) {
  std::string why;
  if (!compress::gpu::Usable(&why)) return Status::FailedPrecondition(why);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (device < 0 || device >= count) {
    return Status::InvalidArgument(
        fmt::format("GPU {} does not exist ({} visible)", device, count));
  }
  return std::unique_ptr<DeviceIo>(std::make_unique<CudaDeviceIo>(std::move(client), device));
}

}  // namespace hetps
