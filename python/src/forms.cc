// The engine's request forms from Python (forms.h): prepared paged writes and scatters, cancel by
// id, zero-copy sends from and receives into registered memory. Every engine call releases the
// GIL; errors are the package's exceptions; callbacks run on the callback thread with the GIL.
#include "forms.h"

#include <pybind11/stl.h>

#include "args.h"
#include "callbacks.h"
#include "errors.h"
#include "py_engine.h"

namespace fabric_lib::python {

namespace {

uint32_t bound_arg(int64_t v, const char* name) {
  if (v < 1 || v > 0xFFFFFFFFll) {
    throw py::value_error(std::string(name) + " must be in 1 .. 2**32-1, got " + std::to_string(v));
  }
  return static_cast<uint32_t>(v);
}

}  // namespace

// --- PyEngine's methods --------------------------------------------------------------------------

PyPreparedPagedWrites PyEngine::prepare_paged_writes(int64_t page_length, const PyMrHandle& src, int64_t src_stride,
                                                     int64_t src_offset, const MrDesc& dst, int64_t dst_stride,
                                                     int64_t dst_offset, int64_t src_page_bound, int64_t dst_page_bound,
                                                     std::optional<uint32_t> num_shards, std::optional<uint32_t> domain) {
  PagedWriteTemplate t;
  t.src = src.handle;
  t.dst = dst;
  t.page_length = non_negative(page_length, "length");
  t.src_stride = non_negative(src_stride, "src_stride");
  t.dst_stride = non_negative(dst_stride, "dst_stride");
  t.src_offset = non_negative(src_offset, "src_offset");
  t.dst_offset = non_negative(dst_offset, "dst_offset");
  t.src_page_bound = bound_arg(src_page_bound, "src_page_bound");
  t.dst_page_bound = bound_arg(dst_page_bound, "dst_page_bound");
  t.route = route_of(num_shards, domain);
  auto e = engine();  // StoppedError before anything else
  auto reg = registration_of(src);
  PreparedPagedWrites p = take(without_gil([&] { return e->prepare_paged_writes(t); }));
  return PyPreparedPagedWrites{std::move(p), serial_, reg->keepalive, t.page_length, t.src_page_bound, t.dst_page_bound};
}

uint64_t PyEngine::submit_prepared_paged_writes(const PyPreparedPagedWrites& prepared, const py::object& src_pages,
                                                const py::object& dst_pages, const py::object& imm,
                                                const py::object& on_done, const py::object& on_error, Timeout timeout) {
  const std::vector<uint32_t> src_list = pages_of(src_pages, "src_page_indices");
  const std::vector<uint32_t> dst_list = pages_of(dst_pages, "dst_page_indices");
  const std::optional<uint32_t> value = optional_imm(imm);
  auto e = engine();
  Completion done =
      completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), prepared.keepalive, timeout);
  return take(without_gil([&] { return e->submit_prepared(prepared.prepared, src_list, dst_list, value, std::move(done)); }));
}

PyPreparedScatter PyEngine::prepare_scatter(const PyMrHandle& src, const PyPeerGroup& group,
                                            const std::vector<PreparedScatterTarget>& targets, bool by_bytes,
                                            std::optional<uint32_t> num_shards, std::optional<uint32_t> domain) {
  if (group.engine_serial != serial_) {
    throw StatusError(invalid_argument("prepare_scatter: the PeerGroup belongs to another engine"));
  }
  ScatterTemplate t;
  t.src = src.handle;
  t.group = &group.group;
  t.targets = targets;
  t.sharding = by_bytes ? ScatterSharding::kByBytes : ScatterSharding::kByPeer;
  t.route = route_of(num_shards, domain);
  auto e = engine();
  auto reg = registration_of(src);
  PreparedScatter p = take(without_gil([&] { return e->prepare_scatter(t); }));
  return PyPreparedScatter{std::move(p), serial_, reg->keepalive, targets};
}

uint64_t PyEngine::submit_prepared_scatter(const PyPreparedScatter& prepared, const std::vector<ScatterSlice>& slices,
                                           const py::object& imm, const py::object& on_done, const py::object& on_error,
                                           Timeout timeout) {
  const std::optional<uint32_t> value = optional_imm(imm);
  auto e = engine();
  Completion done =
      completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), prepared.keepalive, timeout);
  return take(without_gil([&] { return e->submit_prepared(prepared.prepared, slices, value, std::move(done)); }));
}

void PyEngine::cancel(uint64_t transfer_id) {
  auto e = engine();
  check(without_gil([&] { return e->cancel(transfer_id); }));
}

size_t PyEngine::progress(size_t max_events) {
  auto e = engine();
  return without_gil([&] { return e->progress(max_events); });
}

uint64_t PyEngine::submit_send_from(const DomainAddress& addr, const PyMrHandle& src, int64_t offset, int64_t length,
                                    const py::object& on_done, const py::object& on_error, Timeout timeout) {
  const uint64_t off = non_negative(offset, "offset");
  const uint64_t len = non_negative(length, "length");
  auto e = engine();
  auto reg = registration_of(src);
  Completion done = completion_of(callable_arg(on_done, "on_done"), callable_arg(on_error, "on_error"), reg->keepalive, timeout);
  return take(without_gil([&] { return e->submit_send(addr, src.handle, off, len, std::move(done)); }));
}

void PyEngine::submit_recvs_into(const PyMrHandle& region, int64_t offset, int64_t slot_len, int64_t count,
                                 const py::object& on_recv, const py::object& on_error) {
  if (on_recv.is_none()) throw py::type_error("submit_recvs_into: on_recv must be callable");
  const uint64_t off = non_negative(offset, "offset");
  const uint64_t slot = non_negative(slot_len, "slot_len");
  const uint64_t n = non_negative(count, "count");
  auto e = engine();
  auto reg = registration_of(region);
  // The callback holds the buffer's keep-alive: the engine receives into it until it stops.
  RecvCallback recv = recv_into_callback_of(callable_arg(on_recv, "on_recv"), region.ptr, reg->keepalive);
  RecvErrorCallback err = recv_error_callback_of(callable_arg(on_error, "on_error"));
  check(without_gil([&] { return e->post_recvs_into(region.handle, off, slot, n, std::move(recv), std::move(err)); }));
}

// --- bindings ------------------------------------------------------------------------------------

void bind_form_types(py::module_& m) {
  py::class_<PyPreparedPagedWrites>(m, "PreparedPagedWrites",
                                    "A paged write validated and planned once by ``prepare_paged_writes``; submit it\n"
                                    "many times with ``submit_prepared_paged_writes``. Valid for the engine that made\n"
                                    "it until its source is unregistered. It keeps the source buffer alive.")
      .def_property_readonly("page_length", [](const PyPreparedPagedWrites& p) { return p.page_length; }, "Bytes per page.")
      .def_property_readonly("src_page_bound", [](const PyPreparedPagedWrites& p) { return p.src_page_bound; },
                             "Source page indices must be below this.")
      .def_property_readonly("dst_page_bound", [](const PyPreparedPagedWrites& p) { return p.dst_page_bound; },
                             "Destination page indices must be below this.")
      .def("__repr__", [](const PyPreparedPagedWrites& p) {
        return "PreparedPagedWrites(page_length=" + std::to_string(p.page_length) +
               ", src_page_bound=" + std::to_string(p.src_page_bound) +
               ", dst_page_bound=" + std::to_string(p.dst_page_bound) + ")";
      });

  py::class_<PyPreparedScatter>(m, "PreparedScatter",
                                "A scatter validated and resolved once by ``prepare_scatter``; submit it many times\n"
                                "with ``submit_prepared_scatter`` (one ScatterSlice per prepared target).")
      .def("__len__", [](const PyPreparedScatter& p) { return p.targets.size(); }, "Prepared targets.")
      .def_property_readonly("targets", [](const PyPreparedScatter& p) { return p.targets; },
                             "The prepared targets, in order.")
      .def("__repr__", [](const PyPreparedScatter& p) {
        return "PreparedScatter(" + std::to_string(p.targets.size()) + " targets)";
      });

  py::class_<PreparedScatterTarget>(m, "PreparedScatterTarget",
                                    "One destination of ``prepare_scatter``: PeerGroup index ``peer``, the source\n"
                                    "window [src_offset, src_offset + src_window) and the destination window\n"
                                    "[dst_offset, dst_offset + dst_window) that every submit's slice stays within.")
      .def(py::init([](uint32_t peer, uint64_t src_offset, uint64_t src_window, uint64_t dst_offset, uint64_t dst_window) {
             return PreparedScatterTarget{peer, src_offset, src_window, dst_offset, dst_window};
           }),
           py::arg("peer"), py::arg("src_offset"), py::arg("src_window"), py::arg("dst_offset"), py::arg("dst_window"))
      .def_readonly("peer", &PreparedScatterTarget::peer, "Index into the PeerGroup.")
      .def_readonly("src_offset", &PreparedScatterTarget::src_offset, "Start of the source window.")
      .def_readonly("src_window", &PreparedScatterTarget::src_window, "Bytes in the source window.")
      .def_readonly("dst_offset", &PreparedScatterTarget::dst_offset, "Start of the destination window.")
      .def_readonly("dst_window", &PreparedScatterTarget::dst_window, "Bytes in the destination window.")
      .def("__repr__", [](const PreparedScatterTarget& t) {
        return "PreparedScatterTarget(peer=" + std::to_string(t.peer) + ", src_offset=" + std::to_string(t.src_offset) +
               ", src_window=" + std::to_string(t.src_window) + ", dst_offset=" + std::to_string(t.dst_offset) +
               ", dst_window=" + std::to_string(t.dst_window) + ")";
      });

  py::class_<ScatterSlice>(m, "ScatterSlice",
                           "What one ``submit_prepared_scatter`` writes to one prepared target: ``length`` bytes\n"
                           "from its source window at ``offset_in_src`` to its destination window at\n"
                           "``offset_in_dst``. A zero length still delivers the imm (one per target by peer).")
      .def(py::init([](uint64_t length, uint64_t offset_in_src, uint64_t offset_in_dst) {
             return ScatterSlice{length, offset_in_src, offset_in_dst};
           }),
           py::arg("length"), py::arg("offset_in_src") = 0, py::arg("offset_in_dst") = 0)
      .def_readonly("length", &ScatterSlice::length, "Bytes to write.")
      .def_readonly("offset_in_src", &ScatterSlice::offset_in_src, "Offset inside the target's source window.")
      .def_readonly("offset_in_dst", &ScatterSlice::offset_in_dst, "Offset inside the target's destination window.")
      .def("__repr__", [](const ScatterSlice& s) {
        return "ScatterSlice(length=" + std::to_string(s.length) + ", offset_in_src=" + std::to_string(s.offset_in_src) +
               ", offset_in_dst=" + std::to_string(s.offset_in_dst) + ")";
      });
}

void bind_forms(py::class_<PyEngine>& cls) {
  using E = PyEngine;
  cls.def("prepare_paged_writes", &E::prepare_paged_writes, py::arg("length"), py::arg("src_mr"), py::arg("src_stride"),
          py::arg("src_offset"), py::arg("dst_mr"), py::arg("dst_stride"), py::arg("dst_offset"),
          py::arg("src_page_bound"), py::arg("dst_page_bound"), py::arg("num_shards") = py::none(), py::kw_only(),
          py::arg("domain") = py::none(),
          "Validates and plans a paged write once (regions, descriptor, strides, route, and that\n"
          "pages below ``src_page_bound`` / ``dst_page_bound`` fit) and resolves its peer; returns a\n"
          "PreparedPagedWrites. Raises like ``submit_paged_writes`` would.")
      .def("submit_prepared_paged_writes", &E::submit_prepared_paged_writes, py::arg("prepared"),
           py::arg("src_page_indices"), py::arg("dst_page_indices"), py::arg("imm_data"), py::arg("on_done") = py::none(),
           py::arg("on_error") = py::none(), py::kw_only(), py::arg("timeout") = py::none(),
           "One paged write of a PreparedPagedWrites: only the page lists (within the prepared bounds,\n"
           "else OutOfRangeError) and the imm change. One imm per page arrives\n"
           "(``imm_count_of_paged_writes``). Returns the transfer id.")
      .def("prepare_scatter", &E::prepare_scatter, py::arg("src_mr"), py::arg("peer_group"), py::arg("targets"),
           py::kw_only(), py::arg("by_bytes") = false, py::arg("num_shards") = py::none(), py::arg("domain") = py::none(),
           "Validates a scatter once: ``targets`` is a list of PreparedScatterTarget naming peers of\n"
           "``peer_group`` (from add_peer_group) and windows that must lie inside the source region\n"
           "and the peers' regions. Returns a PreparedScatter.")
      .def("submit_prepared_scatter", &E::submit_prepared_scatter, py::arg("prepared"), py::arg("slices"),
           py::arg("imm_data"), py::arg("on_done") = py::none(), py::arg("on_error") = py::none(), py::kw_only(),
           py::arg("timeout") = py::none(),
           "One scatter of a PreparedScatter: ``slices`` holds one ScatterSlice per prepared target,\n"
           "in order, each within its windows (else OutOfRangeError). Target t receives\n"
           "``imm_count_of_scatter_target(slices[t].length, nets_per_gpu, by_bytes, num_shards)`` imms.")
      .def("cancel", &E::cancel, py::arg("transfer_id"),
           "Cancels an accepted operation by its transfer id: work not yet posted is dropped, posted\n"
           "work is awaited, then it completes exactly once with CancelledError — or with the outcome\n"
           "it already had. Raises NotFoundError when the id is not in flight (it completed, or was\n"
           "never issued here) and StoppedError after stop(). The receiver's imm count for a\n"
           "cancelled write is whatever arrived: remove_imm_count() the imm before reusing it.")
      .def("progress", &E::progress, py::arg("max_events") = 64,
           "Polls the engine's domains on this thread for up to ``max_events`` events (completions,\n"
           "imms, messages) and applies their counts, flags and expectations here, without waiting\n"
           "for the worker thread; callbacks still run on the callback thread. Returns how many\n"
           "events it handled (0 when the worker holds the engine at the moment: it does the work\n"
           "then; always 0 on shm, whose calls only the worker makes). Never blocks; for loops that\n"
           "spin on an imm count. StoppedError after stop().")
      .def("submit_send_from", &E::submit_send_from, py::arg("addr"), py::arg("src_mr"), py::arg("offset"),
           py::arg("length"), py::arg("on_done") = py::none(), py::arg("on_error") = py::none(), py::kw_only(),
           py::arg("timeout") = py::none(),
           "Sends ``length`` bytes at ``offset`` of a registered host region (group 0) without a copy:\n"
           "change them only after ``on_done``/``on_error``. Otherwise like ``submit_send``.")
      .def("submit_recvs_into", &E::submit_recvs_into, py::arg("region"), py::arg("offset"), py::arg("slot_len"),
           py::arg("count"), py::arg("on_recv"), py::arg("on_error") = py::none(),
           "Posts ``count`` receive buffers of ``slot_len`` bytes inside the registered host region\n"
           "``region`` (group 0), from ``offset``. Each message is reported as ``on_recv(offset,\n"
           "length)`` — where it landed, from the region's start — and its slot is posted again once\n"
           "the callback returns: read it from your own array inside the callback.")
      .def("set_imm_count_every", &E::set_imm_count_every, py::arg("imm"), py::arg("expected_count"),
           py::arg("on_round"), py::arg("on_end") = py::none(),
           "Calls ``on_round(round)`` (1, 2, 3, ... in order) every time ``expected_count`` more imms of\n"
           "value ``imm`` have arrived — those that came before this call included — consuming that\n"
           "many each time, until ``remove_imm_count`` (or stop()) ends it: then ``on_end(err, rounds)``\n"
           "runs once with CancelledError and the rounds fired. Raises AlreadyExistsError while\n"
           "``imm`` has an expectation.")
      .def("imm_rounds", &E::imm_rounds, py::arg("imm"),
           "Rounds the repeating expectation of ``imm`` has fired (0 when it has none).");
}

}  // namespace fabric_lib::python
