#include "py_engine.h"

#include "metrics_bindings.h"

#include <pybind11/stl.h>

#include <atomic>
#include <condition_variable>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "args.h"
#include "callbacks.h"
#include "errors.h"
#include "tensor_memory.h"

namespace fabric_lib::python {

namespace {

std::atomic<uint64_t> g_next_serial{1};

// Engines alive in this process, for stop_all_at_exit(), and engine teardowns handed to helper
// threads that exit must wait for.
std::mutex g_registry_mu;
std::condition_variable g_registry_cv;
struct LiveEngine {
  std::weak_ptr<TransferEngine> engine;
  int pid = 0;  // the creating process
};
std::vector<LiveEngine> g_engines;
size_t g_pending_teardowns = 0;

void register_engine(const std::shared_ptr<TransferEngine>& e) {
  std::lock_guard lock(g_registry_mu);
  std::erase_if(g_engines, [](const LiveEngine& l) { return l.engine.expired(); });
  g_engines.push_back({e, static_cast<int>(getpid())});
}

// Keeps an engine inherited through fork() from ever being stopped or freed in this process.
void leak_forked(std::shared_ptr<TransferEngine> e) { new std::shared_ptr<TransferEngine>(std::move(e)); }

// Holds a C-contiguous buffer export for the duration of a call.
class BufferView {
 public:
  BufferView(const py::object& obj, const char* name) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) {
      PyErr_Clear();
      throw py::type_error(std::string(name) + ": expected a C-contiguous bytes-like object (bytes, bytearray, memoryview, "
                           "contiguous numpy array), got " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    }
  }
  ~BufferView() { PyBuffer_Release(&view_); }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(view_.buf), static_cast<size_t>(view_.len)}; }

 private:
  Py_buffer view_{};
};

}  // namespace

struct PyEngine::ExpectTable {
  struct Entry {
    uint64_t expected = 0;
    uint64_t generation = 0;
  };
  std::mutex mu;
  std::unordered_map<uint32_t, Entry> entries;
  uint64_t next_generation = 1;
};

PyEngine::PyEngine(const EngineConfig& c)
    : serial_(g_next_serial.fetch_add(1)), pid_(static_cast<int>(getpid())), expectations_(std::make_shared<ExpectTable>()) {
  TransferEngineBuilder b;
  b.provider(c.provider).domains_per_group(c.domains_per_group).groups(c.groups);
  if (!c.interfaces.empty()) b.interfaces(c.interfaces);
  for (const auto& [group, names] : c.group_interfaces) b.group_interfaces(group, names);
  for (const auto& [group, cpu] : c.pin_workers) b.pin_worker(group, cpu);
  if (c.idle_policy == "spin") {
    b.idle_policy(IdlePolicy::kSpin);
  } else if (c.idle_policy == "adaptive") {
    b.idle_policy(IdlePolicy::kAdaptive);
  } else {
    throw py::value_error("idle_policy must be 'adaptive' or 'spin', got '" + c.idle_policy + "'");
  }
  if (c.max_inflight_per_domain) b.max_inflight_per_domain(*c.max_inflight_per_domain);
  if (c.max_message_bytes) b.max_message_bytes(*c.max_message_bytes);
  if (c.imm_table_capacity) b.imm_table_capacity(*c.imm_table_capacity);
  if (c.simulate_unordered_network) b.simulate_unordered_network(c.simulate_unordered_network);
  if (c.default_timeout) b.default_timeout(seconds_arg(*c.default_timeout, "default_timeout"));
  if (c.stall_timeout) {
    b.stall_timeout(*c.stall_timeout == 0 ? std::chrono::nanoseconds(0) : seconds_arg(*c.stall_timeout, "stall_timeout"));
  }
  if (c.peer_retry_interval) b.peer_retry_interval(seconds_arg(*c.peer_retry_interval, "peer_retry_interval"));
  if (c.topology) b.from_topology(*c.topology, c.nets_per_gpu);
  b.metrics(c.metrics);
  if (!c.metrics_endpoint.empty()) b.metrics_endpoint(c.metrics_endpoint);
  std::unique_ptr<TransferEngine> built = take(without_gil([&] { return b.build(); }));
  engine_ = std::shared_ptr<TransferEngine>(std::move(built));
  main_address_ = engine_->main_address();
  num_groups_ = engine_->num_groups();
  domains_per_group_ = engine_->num_domains();
  provider_ = engine_->provider();
  metrics_endpoint_ = engine_->metrics_endpoint();
  for (size_t g = 0; g < num_groups_; ++g) domain_addresses_.push_back(engine_->domain_addresses(g));
  register_engine(engine_);
}

PyEngine::~PyEngine() {
  std::shared_ptr<TransferEngine> e;
  {
    std::lock_guard lock(mu_);
    e = std::move(engine_);
  }
  if (!e) return;  // stopped already; the registrations' keep-alives go with the map
  if (!owned_by_this_process()) {
    leak_forked(std::move(e));
    return;
  }
  if (is_callback_thread()) {
    // The last reference went away inside an engine callback: stopping here could wait for this
    // very thread, so a helper thread stops and frees the engine. The registered buffers stay
    // alive until it has.
    auto keep = std::make_shared<std::vector<std::shared_ptr<Registration>>>();
    for (auto& [id, reg] : registrations_) keep->push_back(reg);
    {
      std::lock_guard lock(g_registry_mu);
      ++g_pending_teardowns;
    }
    std::thread([e = std::move(e), keep = std::move(keep)]() mutable {
      e->stop();
      e.reset();
      keep.reset();  // PyRef destructors take the GIL themselves
      std::lock_guard lock(g_registry_mu);
      --g_pending_teardowns;
      g_registry_cv.notify_all();
    }).detach();
    return;
  }
  py::gil_scoped_release nogil;
  e->stop();
  e.reset();
}

bool PyEngine::owned_by_this_process() const { return static_cast<int>(getpid()) == pid_; }

std::shared_ptr<TransferEngine> PyEngine::engine() const {
  if (!owned_by_this_process()) {
    throw StatusError(Status(ErrorCode::kFailedPrecondition,
                             "this engine was created by another process (inherited through fork); build a new one"));
  }
  std::lock_guard lock(mu_);
  if (!engine_) throw StatusError(Status(ErrorCode::kStopped, "engine stopped"));
  return engine_;
}

bool PyEngine::stopped() const {
  std::lock_guard lock(mu_);
  return !engine_ || engine_->stopped();
}

std::vector<DomainAddress> PyEngine::domain_addresses(size_t group) const {
  if (group >= domain_addresses_.size()) {
    throw py::value_error("group " + std::to_string(group) + " out of range (engine has " +
                          std::to_string(domain_addresses_.size()) + " groups)");
  }
  return domain_addresses_[group];
}

// --- memory ------------------------------------------------------------------------------------

py::tuple PyEngine::register_impl(uintptr_t ptr, uint64_t length, MemoryKind kind, Access access, size_t group,
                                  PyRefPtr keepalive) {
  auto e = engine();
  MrRegistration reg = take(without_gil([&] { return e->register_memory(reinterpret_cast<void*>(ptr), length, access, kind, group); }));
  registrations_[reg.handle.id] = std::make_shared<Registration>(Registration{ptr, std::move(keepalive)});
  PyMrHandle h{reg.handle, serial_, ptr, length, kind, access};
  return py::make_tuple(h, reg.desc);
}

py::tuple PyEngine::register_memory(uintptr_t ptr, int64_t length, const py::object& device, bool remote_write, size_t group) {
  if (ptr == 0) throw py::value_error("register_memory: ptr is null");
  if (length <= 0) throw py::value_error("register_memory: len must be > 0, got " + std::to_string(length));
  const MemoryKind kind = memory_kind_of_device(device);
  return register_impl(ptr, static_cast<uint64_t>(length), kind, remote_write ? Access::kRemoteWrite : Access::kLocalOnly,
                       group, make_ref(py::none()));
}

py::tuple PyEngine::register_tensor(const py::object& obj, const py::object& remote_write, size_t group) {
  TensorMemory mem = tensor_memory(obj);
  bool writable_remotely = mem.writable;
  if (!remote_write.is_none()) {
    writable_remotely = remote_write.cast<bool>();
    if (writable_remotely && !mem.writable) {
      throw py::value_error("register_tensor: " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                            " is read-only and cannot be registered with remote_write=True");
    }
  }
  return register_impl(mem.ptr, mem.nbytes, mem.kind, writable_remotely ? Access::kRemoteWrite : Access::kLocalOnly, group,
                       make_ref(std::move(mem.keepalive)));
}

void PyEngine::unregister_memory(const py::object& handle_or_ptr) {
  auto e = engine();
  uint64_t id = 0;
  if (py::isinstance<PyMrHandle>(handle_or_ptr)) {
    const auto& h = handle_or_ptr.cast<const PyMrHandle&>();
    if (h.engine_serial != serial_) {
      throw StatusError(not_found("unregister_memory: the MemoryRegionHandle belongs to another engine"));
    }
    id = h.handle.id;
  } else if (py::isinstance<py::int_>(handle_or_ptr)) {
    const uintptr_t ptr = handle_or_ptr.cast<uintptr_t>();
    for (const auto& [rid, reg] : registrations_) {
      if (reg->ptr == ptr) id = rid;
    }
    if (id == 0) {
      std::ostringstream s;
      s << "unregister_memory: no registration starts at ptr 0x" << std::hex << ptr;
      throw StatusError(not_found(s.str()));
    }
  } else {
    throw py::type_error("unregister_memory: expected a MemoryRegionHandle or a pointer (int)");
  }
  check(without_gil([&] { return e->unregister_memory(MrHandle{id}); }));
  registrations_.erase(id);  // in-flight transfers from it hold their own keep-alive
}

std::shared_ptr<PyEngine::Registration> PyEngine::registration_of(const PyMrHandle& h) const {
  if (h.engine_serial != serial_) throw StatusError(not_found("the MemoryRegionHandle belongs to another engine"));
  auto it = registrations_.find(h.handle.id);
  if (it == registrations_.end()) {
    throw StatusError(not_found("unknown or unregistered MemoryRegionHandle (id " + std::to_string(h.handle.id) + ")"));
  }
  return it->second;
}

// --- transfers ---------------------------------------------------------------------------------

uint64_t PyEngine::submit_send(const DomainAddress& addr, const py::buffer& data, const py::object& on_done,
                               const py::object& on_error, Timeout timeout) {
  Completion done = completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), nullptr, timeout);
  BufferView view(data, "submit_send: data");
  auto e = engine();
  return take(without_gil([&] { return e->submit_send(addr, view.bytes(), std::move(done)); }));
}

void PyEngine::submit_bouncing_recvs(int64_t count, int64_t length, const py::object& on_recv, const py::object& on_error) {
  if (on_recv.is_none()) throw py::type_error("submit_bouncing_recvs: on_recv must be callable");
  RecvCallback recv = recv_callback_of(callable_arg(on_recv, "on_recv"));
  RecvErrorCallback err = recv_error_callback_of(callable_arg(on_error, "on_error"));
  const uint64_t n = non_negative(count, "count");
  const uint64_t len = non_negative(length, "len");
  auto e = engine();
  check(without_gil([&] { return e->post_recvs(n, len, std::move(recv), std::move(err)); }));
}

uint64_t PyEngine::submit_imm(const py::object& imm, const MrDesc& dst, const py::object& on_done, const py::object& on_error,
                              size_t group, Timeout timeout) {
  const uint32_t value = imm_value(imm, "imm_data");
  Completion done = completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), nullptr, timeout);
  auto e = engine();
  return take(without_gil([&] { return e->submit_imm(value, dst, std::move(done), group); }));
}

uint64_t PyEngine::submit_write(const PyMrHandle& src, int64_t offset, int64_t length, const py::object& imm,
                                const MrDesc& dst, int64_t dst_offset, const py::object& on_done, const py::object& on_error,
                                std::optional<uint32_t> num_shards, std::optional<uint32_t> domain, Timeout timeout) {
  WriteRequest r;
  r.src = src.handle;
  r.src_offset = non_negative(offset, "offset");
  r.length = non_negative(length, "length");
  r.imm = optional_imm(imm);
  r.dst = dst;
  r.dst_offset = non_negative(dst_offset, "dst_offset");
  r.route = route_of(num_shards, domain);
  auto e = engine();  // StoppedError before anything else
  auto reg = registration_of(src);
  Completion done = completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), reg->keepalive, timeout);
  return take(without_gil([&] { return e->submit_write(std::move(r), std::move(done)); }));
}

uint64_t PyEngine::submit_paged_writes(int64_t page_length, const PyMrHandle& src, const py::object& src_pages,
                                       int64_t src_stride, int64_t src_offset, const MrDesc& dst, const py::object& dst_pages,
                                       int64_t dst_stride, int64_t dst_offset, const py::object& imm,
                                       const py::object& on_done, const py::object& on_error,
                                       std::optional<uint32_t> num_shards, std::optional<uint32_t> domain,
                                       Timeout timeout) {
  PagedWriteRequest r;
  r.src = src.handle;
  r.dst = dst;
  r.page_length = non_negative(page_length, "length");
  r.src_pages = pages_of(src_pages, "src_page_indices");
  r.dst_pages = pages_of(dst_pages, "dst_page_indices");
  r.src_stride = non_negative(src_stride, "src_stride");
  r.dst_stride = non_negative(dst_stride, "dst_stride");
  r.src_offset = non_negative(src_offset, "src_offset");
  r.dst_offset = non_negative(dst_offset, "dst_offset");
  r.imm = optional_imm(imm);
  r.route = route_of(num_shards, domain);
  auto e = engine();  // StoppedError before anything else
  auto reg = registration_of(src);
  Completion done = completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), reg->keepalive, timeout);
  return take(without_gil([&] { return e->submit_paged_writes(std::move(r), std::move(done)); }));
}

uint64_t PyEngine::submit_scatter(const PyMrHandle& src, const std::vector<PyScatterTarget>& targets, const py::object& imm,
                                  const py::object& on_done, const py::object& on_error, bool by_bytes,
                                  std::optional<uint32_t> num_shards, std::optional<uint32_t> domain,
                                  const py::object& peer_group, Timeout timeout) {
  ScatterRequest r;
  r.src = src.handle;
  r.imm = optional_imm(imm);
  r.sharding = by_bytes ? ScatterSharding::kByBytes : ScatterSharding::kByPeer;
  r.route = route_of(num_shards, domain);
  PeerGroup group;
  if (!peer_group.is_none()) {
    const auto& g = peer_group.cast<const PyPeerGroup&>();
    if (g.engine_serial != serial_) throw StatusError(invalid_argument("submit_scatter: the PeerGroup belongs to another engine"));
    group = g.group;
    r.group = &group;
  }
  r.targets.reserve(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const PyScatterTarget& t = targets[i];
    if (!t.dst && peer_group.is_none()) {
      throw py::value_error("submit_scatter: target " + std::to_string(i) + " has no dst_mr (and no peer_group was given)");
    }
    r.targets.push_back(ScatterTarget{t.length, t.src_offset, t.dst_offset, t.dst.value_or(MrDesc()), t.peer});
  }
  auto e = engine();  // StoppedError before anything else
  auto reg = registration_of(src);
  Completion done = completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), reg->keepalive, timeout);
  return take(without_gil([&] { return e->submit_scatter(std::move(r), std::move(done)); }));
}

uint64_t PyEngine::submit_barrier(const py::object& imm, const std::vector<MrDesc>& dsts, const py::object& on_done,
                                  const py::object& on_error, size_t group, Timeout timeout) {
  const uint32_t value = imm_value(imm, "imm_data");
  Completion done = completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), nullptr, timeout);
  auto e = engine();
  return take(without_gil([&] { return e->submit_barrier(value, dsts, std::move(done), group); }));
}

PyPeerGroup PyEngine::add_peer_group(const std::vector<MrDesc>& dsts, size_t group) {
  auto e = engine();
  return PyPeerGroup{take(without_gil([&] { return e->add_peer_group(dsts, group); })), serial_};
}

// --- imm counting ------------------------------------------------------------------------------

void PyEngine::set_imm_callback(const py::object& cb) {
  PyRefPtr ref = callable_arg(cb, "callback");
  ImmCounter::Observer observer = cb.is_none() ? ImmCounter::Observer() : observer_of(std::move(ref));
  auto e = engine();
  without_gil([&] {
    e->imms().set_observer(std::move(observer));
    return 0;
  });
}

void PyEngine::set_imm_count_expected(const py::object& imm, int64_t expected, const py::object& on_reached,
                                      const py::object& on_error, Timeout timeout) {
  const uint32_t value = imm_value(imm, "imm");
  if (expected < 1) throw py::value_error("expected_count must be >= 1, got " + std::to_string(expected));
  PyRefPtr reached_fn = callable_arg(on_reached, "on_reached");
  const bool async_slot = is_async_slot(reached_fn);  // wait_imm_count's future
  CompletionCallback inner = callback_of(std::move(reached_fn), callable_arg(on_error, "on_error"));
  auto e = engine();
  uint64_t generation = 0;
  {
    std::lock_guard lock(expectations_->mu);
    generation = expectations_->next_generation++;
  }
  std::weak_ptr<ExpectTable> table = expectations_;
  auto forget = [table, value, generation] {
    if (auto t = table.lock()) {
      std::lock_guard lock(t->mu);
      auto it = t->entries.find(value);
      if (it != t->entries.end() && it->second.generation == generation) t->entries.erase(it);
    }
  };
  auto reached = [fn = std::move(inner), forget](const Status& s) mutable {
    forget();
    fn(s);
  };
  // wait_imm_count's future is settled on the thread that counts the last imm or ends the
  // expectation (one hop fewer than the callback thread). forget() only takes the table's mutex,
  // whose holders never wait for anything that fires a sink (the counter fires sinks after it
  // released its own lock, which has_expectation() below takes under the mutex).
  Completion sink = async_slot ? Completion::inline_callback(std::move(reached)) : Completion::callback(std::move(reached));
  if (timeout) sink.with_deadline(Clock::now() + seconds_arg(*timeout, "timeout"));
  Status st = without_gil([&] {
    // Recorded before expect(): the sink may fire (on another thread, or inside expect()) before it returns.
    {
      std::lock_guard lock(expectations_->mu);
      if (!e->imms().has_expectation(value)) expectations_->entries[value] = {static_cast<uint64_t>(expected), generation};
    }
    Status s = e->imms().expect(value, static_cast<uint64_t>(expected), std::move(sink));
    if (!s.ok() && s.code() != ErrorCode::kAlreadyExists) forget();
    return s;
  });
  check(st);
}

void PyEngine::set_imm_count_every(const py::object& imm, int64_t every, const py::object& on_round,
                                   const py::object& on_end) {
  const uint32_t value = imm_value(imm, "imm");
  if (every < 1) throw py::value_error("expected_count must be >= 1, got " + std::to_string(every));
  if (on_round.is_none()) throw py::type_error("set_imm_count_every: on_round must be callable");
  PyRefPtr round_fn = callable_arg(on_round, "on_round");
  PyRefPtr end_fn = callable_arg(on_end, "on_end");
  auto e = engine();
  uint64_t generation = 0;
  {
    std::lock_guard lock(expectations_->mu);
    generation = expectations_->next_generation++;
  }
  std::weak_ptr<ExpectTable> table = expectations_;
  auto forget = [table, value, generation] {
    if (auto t = table.lock()) {
      std::lock_guard lock(t->mu);
      auto it = t->entries.find(value);
      if (it != t->entries.end() && it->second.generation == generation) t->entries.erase(it);
    }
  };
  RepeatingSink sink = RepeatingSink::callback(repeating_callback_of(std::move(round_fn), std::move(end_fn), forget));
  Status st = without_gil([&] {
    {
      std::lock_guard lock(expectations_->mu);
      if (!e->imms().has_expectation(value)) expectations_->entries[value] = {static_cast<uint64_t>(every), generation};
    }
    Status s = e->imms().expect_every(value, static_cast<uint64_t>(every), std::move(sink));
    if (!s.ok() && s.code() != ErrorCode::kAlreadyExists) forget();
    return s;
  });
  check(st);
}

uint64_t PyEngine::imm_rounds(const py::object& imm) {
  const uint32_t value = imm_value(imm, "imm");
  return engine()->imms().rounds(value);
}

py::object PyEngine::remove_imm_count(const py::object& imm) {
  const uint32_t value = imm_value(imm, "imm");
  auto e = engine();
  // Taken out of the table before release(): the cancelled sink erases it on the callback thread.
  uint64_t expected = 0;
  {
    std::lock_guard lock(expectations_->mu);
    auto it = expectations_->entries.find(value);
    if (it != expectations_->entries.end()) {
      expected = it->second.expected;
      expectations_->entries.erase(it);
    }
  }
  uint64_t count = 0;
  Status st = without_gil([&] {
    count = e->imms().count(value);
    return e->imms().release(value);
  });
  if (st.code() == ErrorCode::kNotFound) return py::none();
  check(st);
  return py::make_tuple(count, expected);
}

uint64_t PyEngine::imm_count(const py::object& imm) {
  const uint32_t value = imm_value(imm, "imm");
  return engine()->imms().count(value);
}

py::dict PyEngine::stats() {
  EngineStats s = engine()->stats();
  py::dict d;
  d["requests_submitted"] = s.requests_submitted;
  d["requests_completed"] = s.requests_completed;
  d["requests_failed"] = s.requests_failed;
  d["wrs_posted"] = s.wrs_posted;
  d["imms_received"] = s.imms_received;
  d["messages_received"] = s.messages_received;
  return d;
}

py::dict PyEngine::metrics() {
  std::shared_ptr<TransferEngine> e = engine();
  Metrics m = without_gil([&] { return e->metrics(); });
  return metrics_dict(m);
}

// --- lifecycle ---------------------------------------------------------------------------------

void PyEngine::stop() {
  if (!owned_by_this_process()) {
    std::lock_guard lock(mu_);
    if (engine_) leak_forked(std::move(engine_));
    return;
  }
  std::shared_ptr<TransferEngine> e;
  {
    std::lock_guard lock(mu_);
    e = engine_;
  }
  if (!e) return;
  // Callbacks of the operations being cancelled need the GIL, so wait for them without it.
  check(without_gil([&] { return e->stop(); }));  // FailedPrecondition from inside a callback
  {
    std::lock_guard lock(mu_);
    engine_.reset();
  }
  without_gil([&] {
    e.reset();  // frees the receive/imm callbacks the engine held (they take the GIL themselves)
    return 0;
  });
  registrations_.clear();
}

void PyEngine::stop_all_at_exit() {
  std::vector<std::shared_ptr<TransferEngine>> alive;
  {
    std::lock_guard lock(g_registry_mu);
    for (auto& l : g_engines) {
      if (l.pid != static_cast<int>(getpid())) continue;  // inherited through fork(): not ours to stop
      if (auto e = l.engine.lock()) alive.push_back(std::move(e));
    }
    g_engines.clear();
  }
  py::gil_scoped_release nogil;
  for (auto& e : alive) e->stop();
  std::unique_lock lock(g_registry_mu);
  g_registry_cv.wait_for(lock, std::chrono::seconds(10), [] { return g_pending_teardowns == 0; });
}

}  // namespace fabric_lib::python
