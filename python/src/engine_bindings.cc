// Python signatures and docstrings of TransferEngine (the C++ side; the package's
// fabric_lib.TransferEngine subclasses it with asyncio forms and a context manager).
#include <pybind11/stl.h>

#include "py_engine.h"

namespace fabric_lib::python {

void bind_engine(py::module_& m) {
  using E = PyEngine;
  py::class_<E> cls(m, "TransferEngine",
                "RDMA-style point-to-point transfers: WRITE / WRITE_WITH_IMM, SEND/RECV, paged writes,\n"
                "scatter and barrier over one or more domains (NICs) per group, with imm counting that\n"
                "assumes no network ordering.\n\n"
                "Every ``submit_*`` either raises at once (a FabricError subclass, ValueError or\n"
                "TypeError; nothing was started) or is accepted and later calls exactly one of\n"
                "``on_done()`` / ``on_error(err)`` on the engine's callback thread, with the GIL held.\n"
                "``err`` is a FabricError instance (``err.code``, ``err.message``). An exception raised\n"
                "by a callback is logged with its traceback (logger ``fabric_lib``) and ignored.\n"
                "Submits release the GIL and never block. Each takes ``timeout=`` (seconds): an\n"
                "operation still unfinished then ends with DeadlineExceededError.");
  cls.def(py::init([](const std::string& provider, size_t domains_per_group, size_t groups,
                       const std::vector<std::string>& interfaces,
                       const std::map<size_t, std::vector<std::string>>& group_interfaces,
                       const std::map<size_t, int>& pin_workers, const std::string& idle_policy,
                       std::optional<size_t> max_inflight_per_domain, std::optional<size_t> max_message_bytes,
                       std::optional<size_t> imm_table_capacity, uint64_t simulate_unordered_network,
                       std::optional<double> default_timeout, std::optional<double> stall_timeout,
                       std::optional<double> peer_retry_interval, std::optional<Topology> topology, bool metrics,
                       std::optional<std::string> metrics_endpoint) {
             EngineConfig c;
             c.provider = provider;
             c.domains_per_group = domains_per_group;
             c.groups = groups;
             c.interfaces = interfaces;
             c.group_interfaces = group_interfaces;
             c.pin_workers = pin_workers;
             c.idle_policy = idle_policy;
             c.max_inflight_per_domain = max_inflight_per_domain;
             c.max_message_bytes = max_message_bytes;
             c.imm_table_capacity = imm_table_capacity;
             c.simulate_unordered_network = simulate_unordered_network;
             c.default_timeout = default_timeout;
             c.stall_timeout = stall_timeout;
             c.peer_retry_interval = peer_retry_interval;
             c.metrics = metrics;
             c.metrics_endpoint = metrics_endpoint.value_or("");
             if (topology) {
               c.topology = std::move(topology);
               c.nets_per_gpu = domains_per_group;  // 0: the smallest NIC count of any group
             }
             return std::make_unique<E>(c);
           }),
           py::arg("provider") = "tcp", py::arg("domains_per_group") = 1, py::arg("groups") = 1,
           py::arg("interfaces") = std::vector<std::string>{},
           py::arg("group_interfaces") = std::map<size_t, std::vector<std::string>>{},
           py::arg("pin_workers") = std::map<size_t, int>{}, py::arg("idle_policy") = "adaptive",
           py::arg("max_inflight_per_domain") = py::none(), py::arg("max_message_bytes") = py::none(),
           py::arg("imm_table_capacity") = py::none(), py::arg("simulate_unordered_network") = 0,
           py::arg("default_timeout") = py::none(), py::arg("stall_timeout") = py::none(),
           py::arg("peer_retry_interval") = py::none(), py::arg("topology") = py::none(),
           py::arg("metrics") = true, py::arg("metrics_endpoint") = py::none(),
           "Builds and starts an engine. Raises a FabricError subclass (e.g. InvalidArgumentError,\n"
           "UnsupportedError, ProviderError) when the settings are invalid or the provider fails.\n"
           "Times are in seconds: ``default_timeout`` is the deadline of requests given none,\n"
           "``stall_timeout`` fails a path without progress for that long (0: off),\n"
           "``peer_retry_interval`` how long an unreachable peer is refused. With ``topology``\n"
           "(detect_topology()), one group per topology group with ``domains_per_group`` of its NICs\n"
           "each (0: the smallest NIC count), workers pinned NUMA-locally. ``metrics=False`` leaves out\n"
           "latency histograms and per-peer metrics; ``metrics_endpoint='127.0.0.1:9464'`` serves the\n"
           "metrics in the Prometheus text format (port 0: a free one, see ``metrics_endpoint``).")
      .def_property_readonly("main_address", &E::main_address,
                             "Address of domain 0 of group 0: where ``submit_send`` messages for this engine go.")
      .def_property_readonly("num_domains", [](const E& e) { return e.num_groups() * e.nets_per_gpu(); },
                             "Domains (NICs) of the engine, all groups together.")
      .def_property_readonly("nets_per_gpu", &E::nets_per_gpu,
                             "Domains per group (``domains_per_group``); peers must use the same number.\n"
                             "This is the ``num_domains`` argument of the ``imm_count_of_*`` functions.")
      .def_property_readonly("num_groups", &E::num_groups, "Groups (one per GPU, typically).")
      .def_property_readonly("provider", &E::provider, "The libfabric provider as resolved, e.g. 'tcp;ofi_rxm'.")
      .def_property_readonly("stopped", &E::stopped, "Whether stop() has run.")
      .def("domain_addresses", &E::domain_addresses, py::arg("group") = 0, "Addresses of every domain of ``group``.")
      .def("register_memory", &E::register_memory, py::arg("ptr"), py::arg("len"), py::arg("device") = "cpu",
           py::kw_only(), py::arg("remote_write") = true, py::arg("group") = 0,
           "Registers ``len`` bytes at address ``ptr`` on ``device`` ('cpu', 'cuda', 'cuda:N', a\n"
           "torch.device or a CUDA ordinal); returns ``(handle, descriptor)``. The caller keeps the\n"
           "memory alive until ``unregister_memory``. With ``remote_write`` peers may write into it.\n"
           "CUDA memory raises UnsupportedError unless the provider supports it.")
      .def("register_tensor", &E::register_tensor, py::arg("tensor"), py::kw_only(), py::arg("remote_write") = py::none(),
           py::arg("group") = 0,
           "Registers the memory of ``tensor``: anything with ``__dlpack__`` (numpy >= 1.22, torch,\n"
           "cupy) or the buffer protocol (bytes, bytearray, memoryview). It must be C-contiguous and\n"
           "non-empty (ValueError otherwise) with plain data elements (TypeError otherwise). The\n"
           "engine keeps the object alive until ``unregister_memory``. ``remote_write`` defaults to\n"
           "whether the object is writable. Returns ``(handle, descriptor)``.")
      .def("unregister_memory", &E::unregister_memory, py::arg("handle"),
           "Forgets a registration, given its MemoryRegionHandle or its start address. New submits\n"
           "naming it raise NotFoundError; transfers already accepted finish first. Raises\n"
           "NotFoundError for an unknown or already unregistered handle.")
      .def("submit_send", &E::submit_send, py::arg("addr"), py::arg("data"), py::arg("on_done") = py::none(),
           py::arg("on_error") = py::none(), py::kw_only(), py::arg("timeout") = py::none(),
           "Sends a copy of ``data`` (bytes-like, up to ``max_message_bytes``) to the engine whose\n"
           "``main_address`` is ``addr``. Returns the transfer id.")
      .def("submit_bouncing_recvs", &E::submit_bouncing_recvs, py::arg("count"), py::arg("len"), py::arg("on_recv"),
           py::arg("on_error") = py::none(),
           "Posts ``count`` receive buffers of ``len`` bytes. Each message arriving is passed to\n"
           "``on_recv(bytes)``, then its buffer is posted again. ``on_error(err)`` reports a failed\n"
           "receive (e.g. a message longer than ``len``) and, once, CancelledError at stop().")
      .def("submit_imm", &E::submit_imm, py::arg("imm_data"), py::arg("dst_mr"), py::arg("on_done") = py::none(),
           py::arg("on_error") = py::none(), py::kw_only(), py::arg("group") = 0, py::arg("timeout") = py::none(),
           "A zero-length write carrying ``imm_data`` (0 .. 2**32-1) to the owner of ``dst_mr``:\n"
           "one imm arrives there (IMM_COUNT_OF_IMM_ONLY).")
      .def("submit_write", &E::submit_write, py::arg("src_mr"), py::arg("offset"), py::arg("length"), py::arg("imm_data"),
           py::arg("dst_mr"), py::arg("dst_offset"), py::arg("on_done") = py::none(), py::arg("on_error") = py::none(),
           py::arg("num_shards") = py::none(), py::kw_only(), py::arg("domain") = py::none(), py::arg("timeout") = py::none(),
           "Writes ``length`` bytes from ``src_mr`` at ``offset`` to ``dst_mr`` at ``dst_offset``,\n"
           "with ``imm_data`` (or None) carried by every work request. ``num_shards``: None shards\n"
           "over all domains of the group, N over at most N; ``domain`` pins the write to one domain.\n"
           "The target receives ``imm_count_of_write(length, nets_per_gpu, num_shards, domain)`` imms.\n"
           "Ranges outside either region raise OutOfRangeError.")
      .def("submit_paged_writes", &E::submit_paged_writes, py::arg("length"), py::arg("src_mr"),
           py::arg("src_page_indices"), py::arg("src_stride"), py::arg("src_offset"), py::arg("dst_mr"),
           py::arg("dst_page_indices"), py::arg("dst_stride"), py::arg("dst_offset"), py::arg("imm_data"),
           py::arg("on_done") = py::none(), py::arg("on_error") = py::none(), py::arg("num_shards") = py::none(),
           py::kw_only(), py::arg("domain") = py::none(), py::arg("timeout") = py::none(),
           "Writes pages of ``length`` bytes: page i goes from ``src_offset + src_page_indices[i] *\n"
           "src_stride`` to ``dst_offset + dst_page_indices[i] * dst_stride``. Page lists are\n"
           "PageIndices or iterables of ints, of equal length. One imm per page arrives.")
      .def("submit_scatter", &E::submit_scatter, py::arg("src_mr"), py::arg("targets"), py::arg("imm_data"),
           py::arg("on_done") = py::none(), py::arg("on_error") = py::none(), py::kw_only(), py::arg("by_bytes") = false,
           py::arg("num_shards") = py::none(), py::arg("domain") = py::none(), py::arg("peer_group") = py::none(), py::arg("timeout") = py::none(),
           "Writes slices of ``src_mr`` to many destinations (a list of ScatterTarget) as one\n"
           "request. Targets rotate over the domains (``by_bytes=False``) or each target is sharded\n"
           "like a single write (``by_bytes=True``). With ``peer_group`` (from add_peer_group),\n"
           "targets name their destination by ``peer`` index. Target t receives\n"
           "``imm_count_of_scatter_target(length_t, nets_per_gpu, by_bytes, num_shards)`` imms.")
      .def("submit_barrier", &E::submit_barrier, py::arg("imm_data"), py::arg("dst_mrs"), py::arg("on_done") = py::none(),
           py::arg("on_error") = py::none(), py::kw_only(), py::arg("group") = 0, py::arg("timeout") = py::none(),
           "Sends one imm to the owner of each descriptor in ``dst_mrs``; completes when all were\n"
           "delivered.")
      .def("add_peer_group", &E::add_peer_group, py::arg("dst_mrs"), py::kw_only(), py::arg("group") = 0,
           "Resolves destination descriptors once for repeated ``submit_scatter(peer_group=...)``.")
      .def("set_imm_callback", &E::set_imm_callback, py::arg("callback"),
           "Calls ``callback(imm)`` for every arriving imm (None removes it). An observer only: the\n"
           "counts and expectations are unaffected.")
      .def("set_imm_count_expected", &E::set_imm_count_expected, py::arg("imm"), py::arg("expected_count"),
           py::arg("on_reached"), py::arg("on_error") = py::none(), py::kw_only(), py::arg("timeout") = py::none(),
           "Calls ``on_reached()`` once ``expected_count`` imms of value ``imm`` have arrived —\n"
           "counting those that arrived before this call (early arrivals are never lost) — then\n"
           "consumes that many; any extra stay counted. ``on_error(err)`` gets CancelledError if\n"
           "the expectation is removed or the engine stops first, DeadlineExceededError when\n"
           "``timeout`` seconds pass first (the expectation ends; what arrived stays counted).\n"
           "Raises AlreadyExistsError while ``imm`` has a pending expectation.")
      .def("remove_imm_count", &E::remove_imm_count, py::arg("imm"),
           "Forgets ``imm``: its count drops to 0 and a pending expectation ends with CancelledError.\n"
           "Returns ``(count, expected_count)`` as they were (expected_count 0 without an\n"
           "expectation), or None when ``imm`` was unknown. Use it before reusing an imm value\n"
           "whose earlier imms might still arrive.")
      .def("imm_count", &E::imm_count, py::arg("imm"), "Imms of value ``imm`` arrived and not yet consumed.")
      .def("alloc_scalar_watcher", &E::alloc_scalar_watcher, py::arg("callback"),
           "The UVM watcher: returns a ScalarWatcher, a 64-bit word in mapped pinned host memory\n"
           "(initially 0) that CUDA kernels write at ``.ptr`` (also from inside CUDA graphs). The\n"
           "engine's watcher thread polls it and calls ``callback(old_value, new_value)`` on every\n"
           "change it sees, with the GIL held; returning False stops watching. Keep callbacks short:\n"
           "they run on the watcher thread (they may submit transfers). Raises UnsupportedError\n"
           "without CUDA (build or device).")
      .def("stats", &E::stats, "Counters of the engine's activity (requests, work requests, imms, messages).")
      .def("metrics", &E::metrics,
           "A snapshot of every metric as a dict: ``ops`` (per operation type: requests and work\n"
           "requests submitted/completed/failed by error code, latency histograms), ``domains``,\n"
           "``peers`` (health, bytes, in-flight, WR latency), event counters and ``app`` (metrics\n"
           "the applications registered). Keys: MetricsDict in _fabric_lib.pyi; meanings: docs/operations.md.")
      .def_property_readonly("metrics_endpoint", &E::metrics_endpoint,
                             "``host:port`` of the Prometheus endpoint (the bound port), or '' without one.")
      .def("stop", &E::stop,
           "Completes every accepted, unfinished operation and pending expectation with\n"
           "CancelledError (their callbacks run before this returns), closes the domains and frees\n"
           "the registrations. Idempotent. Raises FailedPreconditionError when called from a\n"
           "callback. Later calls (other than properties) raise StoppedError.");

  bind_forms(cls);  // prepared requests, cancel, registered-memory messages, repeating expectations (forms.cc)

  m.def("_stop_all_engines", &E::stop_all_at_exit, "Stops every running engine (run at interpreter exit).");
}

}  // namespace fabric_lib::python
