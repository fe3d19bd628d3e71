// hetps.Client and hetps.Ticket (python/hetps_module.cc binds them): the C++ client
// (<hetps/client.h>) for Python threads. Arrays cross without copies: push/init send from the
// array's memory and pull writes into it; the client holds each array (Borrowed) until its
// ticket is done, also when the caller dropped the ticket. CUDA arrays go through a DeviceIo
// per GPU (worker/device_io.h). The GIL is released while joining,
// waiting, encoding and clocking. Every call holds the C++ client for its length, so finish()
// or the last reference on another thread never frees it under a call.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hetps/client.h"
#include "python/py_borrowed.h"
#include "worker/device_io.h"

namespace hetps {

// One operation in flight: its ticket (or, for device memory, its DeviceIo handle) and the
// memory it uses.
struct Pending {
  Ticket ticket;
  DeviceIo::Handle device;
  bool on_device = false;
  bool Done() const { return on_device ? device.Done() : ticket.Done(); }
  std::vector<std::unique_ptr<Borrowed>> memory;  // one array, or each of a many-tensor call
  std::string op, tensor;
  int64_t data_ptr = 0;
};

class PyTicket {
 public:
  explicit PyTicket(std::shared_ptr<Pending> p) : p_(std::move(p)) {}
  // Waits without the GIL; raises the operation's first error.
  void Wait();
  bool Done() const { return p_->Done(); }
  int64_t data_ptr() const { return p_->data_ptr; }
  std::string Repr() const;

 private:
  std::shared_ptr<Pending> p_;
};

class PyClient {
 public:
  // scheduler, rank, auth, keys_dir and key_name default to $HETPS_SCHEDULER, $HETPS_RANK,
  // $HETPS_AUTH, $HETPS_KEYS and $HETPS_KEY.
  PyClient(std::string scheduler, std::optional<int> rank, std::string push_codec,
           std::string pull_codec, int heartbeat_interval_ms, int join_timeout_ms,
           int server_recovery_timeout_ms, std::string auth, std::string keys_dir,
           std::string key_name, int64_t shared_memory_bytes, int64_t batch_bytes,
           std::string transport, const LinkOptions& link, double device_slowdown,
           bool virtual_clock, bool tier = true);

  // A client dropped without finish() leaves the cluster here: the transfers in flight end
  // before the arrays they use are released.
  ~PyClient();

  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  // The client, held by the caller for the length of its call: finish() (or another thread's
  // last reference) cannot free it while this thread uses it with the GIL released.
  std::shared_ptr<Client> client();

  void Declare(const pybind11::iterable& tensors);

  PyTicket Start(const std::string& op, const std::string& tensor, pybind11::object array,
                 double weight);

  // push_all / pull_all: many (name, array) pairs, or a dict of them, in one call and one
  // Ticket (their small partitions share messages). Every array is checked before anything is
  // sent.
  PyTicket StartMany(const std::string& op, pybind11::object tensors, double weight);

  // Sparse tables (docs/tables.md): declare_table joins the next declare(); push_rows and
  // pull_rows take int64/uint64 keys and float32 rows of len(keys) * dim.
  void DeclareTable(const std::string& name, const TableOptions& options, int32_t layer);
  PyTicket StartRows(const std::string& op, const std::string& table, pybind11::object keys,
                     pybind11::object rows);

  void Clock();

  void Barrier();

  // Federated rounds (the scheduler runs them: servers with consistency selected or
  // committed): blocks until this client is picked and returns the round (-1: the run's rounds
  // are done); after the round's pushes were acknowledged, finish_round reports the upload and
  // returns whether the round kept it.
  int64_t AwaitRound();
  bool FinishRound(std::optional<bool> within_clip, std::optional<double> within_noisy,
                   std::optional<uint32_t> within_masked);
  // An evaluator's wait (Client::AwaitRoundsClosed): (rounds closed, run finished); `measured`
  // is (round, loss, accuracy) of its previous evaluation.
  std::pair<int64_t, bool> AwaitRoundsClosed(
      int64_t rounds, std::optional<std::tuple<int64_t, double, double>> measured);

  // Other threads still inside a call keep their reference: their calls end at once
  // (FailedPrecondition) and the last of them frees the client.
  void Finish();

  void ReportMetrics(const std::map<std::string, double>& metrics);

  pybind11::dict Stats();

  // Releases the memory of the operations that are done (the GIL is held).
  void Sweep();

  size_t pending();

  // The benchmark's reference: `op` ("push" or "pull") of `array` repeated from C++ for
  // `seconds`, each waited, through this same client; returns (operations, seconds).
  std::pair<int64_t, double> NativeLoop(const std::string& op, const std::string& tensor,
                                        pybind11::object array, double seconds);

 private:
  // Starts `op` of device arrays (every one of the call's on one GPU).
  void StartDevice(Pending& p, const std::string& op, const std::vector<std::string>& names,
                   double weight);
  // Ends the device threads (their started operations finish first); the GIL is released.
  void StopDevices();

  std::shared_ptr<Client> client_;
  std::map<int, std::unique_ptr<DeviceIo>> devices_;
  std::vector<std::shared_ptr<Pending>> pending_;
};

}  // namespace hetps
