// PyEngine: the C++ side of fabric_lib.TransferEngine. Owns a fabric_lib::TransferEngine, keeps
// registered Python buffers alive, releases the GIL around every engine call, and stops cleanly
// from Python, from a destructor, from a callback's thread, or at interpreter exit.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fabric_lib/topology.h"
#include "fabric_lib/fabric_lib.h"
#include "forms.h"
#include "gil.h"
#include "types.h"

namespace fabric_lib::python {

namespace py = pybind11;

// Builder settings as the Python constructor takes them (None = the C++ default).
struct EngineConfig {
  std::string provider = "tcp";
  size_t domains_per_group = 1;
  size_t groups = 1;
  std::vector<std::string> interfaces;
  std::map<size_t, std::vector<std::string>> group_interfaces;
  std::map<size_t, int> pin_workers;
  std::string idle_policy = "adaptive";
  std::optional<size_t> max_inflight_per_domain;
  std::optional<size_t> max_message_bytes;
  std::optional<size_t> imm_table_capacity;
  uint64_t simulate_unordered_network = 0;
  std::optional<double> default_timeout;      // seconds
  std::optional<double> stall_timeout;        // seconds (0: off)
  std::optional<double> peer_retry_interval;  // seconds
  std::optional<Topology> topology;           // with nets_per_gpu: one group per topology group
  size_t nets_per_gpu = 0;                    // for topology (0: the smallest NIC count)
  bool metrics = true;                        // TransferEngineBuilder::metrics()
  std::string metrics_endpoint;               // "" = none (TransferEngineBuilder::metrics_endpoint())
};

class PyEngine {
 public:
  explicit PyEngine(const EngineConfig& config);  // raises FabricError when the build fails
  ~PyEngine();
  PyEngine(const PyEngine&) = delete;
  PyEngine& operator=(const PyEngine&) = delete;

  // Identity (cached at build: still readable after stop()).
  const DomainAddress& main_address() const { return main_address_; }
  size_t num_groups() const { return num_groups_; }
  size_t nets_per_gpu() const { return domains_per_group_; }
  const std::string& provider() const { return provider_; }
  std::vector<DomainAddress> domain_addresses(size_t group) const;
  bool stopped() const;

  // Memory.
  py::tuple register_memory(uintptr_t ptr, int64_t length, const py::object& device, bool remote_write, size_t group);
  py::tuple register_tensor(const py::object& obj, const py::object& remote_write, size_t group);
  void unregister_memory(const py::object& handle_or_ptr);

  // Transfers: each returns the transfer id; on_done() / on_error(FabricError) run later.
  // `timeout` (seconds, optional) ends an operation still unfinished by then with DeadlineExceededError.
  using Timeout = std::optional<double>;
  uint64_t submit_send(const DomainAddress& addr, const py::buffer& data, const py::object& on_done, const py::object& on_error,
                       Timeout timeout);
  void submit_bouncing_recvs(int64_t count, int64_t length, const py::object& on_recv, const py::object& on_error);
  uint64_t submit_imm(const py::object& imm, const MrDesc& dst, const py::object& on_done, const py::object& on_error,
                      size_t group, Timeout timeout);
  uint64_t submit_write(const PyMrHandle& src, int64_t offset, int64_t length, const py::object& imm, const MrDesc& dst,
                        int64_t dst_offset, const py::object& on_done, const py::object& on_error,
                        std::optional<uint32_t> num_shards, std::optional<uint32_t> domain, Timeout timeout);
  uint64_t submit_paged_writes(int64_t page_length, const PyMrHandle& src, const py::object& src_pages, int64_t src_stride,
                               int64_t src_offset, const MrDesc& dst, const py::object& dst_pages, int64_t dst_stride,
                               int64_t dst_offset, const py::object& imm, const py::object& on_done, const py::object& on_error,
                               std::optional<uint32_t> num_shards, std::optional<uint32_t> domain, Timeout timeout);
  uint64_t submit_scatter(const PyMrHandle& src, const std::vector<PyScatterTarget>& targets, const py::object& imm,
                          const py::object& on_done, const py::object& on_error, bool by_bytes,
                          std::optional<uint32_t> num_shards, std::optional<uint32_t> domain, const py::object& peer_group,
                          Timeout timeout);
  uint64_t submit_barrier(const py::object& imm, const std::vector<MrDesc>& dsts, const py::object& on_done,
                          const py::object& on_error, size_t group, Timeout timeout);
  PyPeerGroup add_peer_group(const std::vector<MrDesc>& dsts, size_t group);

  // Request forms (forms.cc): prepared requests, cancel, registered-memory messages.
  PyPreparedPagedWrites prepare_paged_writes(int64_t page_length, const PyMrHandle& src, int64_t src_stride,
                                             int64_t src_offset, const MrDesc& dst, int64_t dst_stride, int64_t dst_offset,
                                             int64_t src_page_bound, int64_t dst_page_bound,
                                             std::optional<uint32_t> num_shards, std::optional<uint32_t> domain);
  uint64_t submit_prepared_paged_writes(const PyPreparedPagedWrites& prepared, const py::object& src_pages,
                                        const py::object& dst_pages, const py::object& imm, const py::object& on_done,
                                        const py::object& on_error, Timeout timeout);
  PyPreparedScatter prepare_scatter(const PyMrHandle& src, const PyPeerGroup& group,
                                    const std::vector<PreparedScatterTarget>& targets, bool by_bytes,
                                    std::optional<uint32_t> num_shards, std::optional<uint32_t> domain);
  uint64_t submit_prepared_scatter(const PyPreparedScatter& prepared, const std::vector<ScatterSlice>& slices,
                                   const py::object& imm, const py::object& on_done, const py::object& on_error,
                                   Timeout timeout);
  void cancel(uint64_t transfer_id);
  size_t progress(size_t max_events);
  uint64_t submit_send_from(const DomainAddress& addr, const PyMrHandle& src, int64_t offset, int64_t length,
                            const py::object& on_done, const py::object& on_error, Timeout timeout);
  void submit_recvs_into(const PyMrHandle& region, int64_t offset, int64_t slot_len, int64_t count,
                         const py::object& on_recv, const py::object& on_error);

  // Imm counting.
  void set_imm_callback(const py::object& cb);
  void set_imm_count_expected(const py::object& imm, int64_t expected, const py::object& on_reached, const py::object& on_error,
                              Timeout timeout);
  // Repeating: on_round(round) every `every` imms, on_end(err, rounds) once when it ends.
  void set_imm_count_every(const py::object& imm, int64_t every, const py::object& on_round, const py::object& on_end);
  uint64_t imm_rounds(const py::object& imm);
  py::object remove_imm_count(const py::object& imm);
  uint64_t imm_count(const py::object& imm);

  py::dict stats();
  py::dict metrics();  // metrics_bindings.h
  const std::string& metrics_endpoint() const { return metrics_endpoint_; }
  void stop();

  // GPU progress (watcher_bindings.cc): a ScalarWatcher whose callback(old, new) runs on the
  // engine's watcher thread with the GIL.
  py::object alloc_scalar_watcher(const py::object& callback);

  // Stops every engine still running (registered with atexit: callbacks need a live interpreter).
  static void stop_all_at_exit();

 private:
  struct Registration {
    uintptr_t ptr = 0;
    PyRefPtr keepalive;  // the buffer's owner (None for register_memory)
  };
  struct ExpectTable;  // imm -> expected count, for remove_imm_count()

  std::shared_ptr<TransferEngine> engine() const;  // raises StoppedError after stop()
  std::shared_ptr<Registration> registration_of(const PyMrHandle& h) const;
  py::tuple register_impl(uintptr_t ptr, uint64_t length, MemoryKind kind, Access access, size_t group, PyRefPtr keepalive);

  // Whether this process created the engine: after fork() the child has its objects but none of
  // its threads, so it must neither stop nor free it (that would join threads that do not exist).
  bool owned_by_this_process() const;

  const uint64_t serial_;
  const int pid_;
  mutable std::mutex mu_;
  std::shared_ptr<TransferEngine> engine_;  // null after stop()
  // Touched only with the GIL held.
  std::unordered_map<uint64_t, std::shared_ptr<Registration>> registrations_;
  std::shared_ptr<ExpectTable> expectations_;
  DomainAddress main_address_;
  std::vector<std::vector<DomainAddress>> domain_addresses_;
  size_t num_groups_ = 0;
  size_t domains_per_group_ = 0;
  std::string metrics_endpoint_;  // cached at build
  std::string provider_;
};

// Binds PyEngine as fabric_lib._fabric_lib.TransferEngine (the Python package subclasses it).
void bind_engine(py::module_& m);

}  // namespace fabric_lib::python
