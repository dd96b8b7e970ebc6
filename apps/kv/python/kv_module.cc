// fabric_lib.kv._kv: the KV-transfer app from Python. An Engine (its own TransferEngine),
// memory registered by pointer (torch: t.data_ptr(), numpy: a.ctypes.data), the Decoder and the
// Prefiller, and the pure planner functions. Errors raise fabric_lib's own exception classes
// (fabric_lib.InvalidArgumentError, ...). Nothing calls back into Python: the roles are polled
// (poll/status/get_finished/wait_finished), which is what SGLang's and vLLM's connectors do.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <memory>

#include "fabric_lib/kv/decoder.h"
#include "fabric_lib/kv/imm.h"
#include "fabric_lib/kv/plan.h"
#include "fabric_lib/kv/prefiller.h"

namespace py = pybind11;
using namespace fabric_lib;
using namespace fabric_lib::kv;

namespace {

std::string class_name_of(const std::string& code) {
  std::string out;
  bool upper = true;
  for (char c : code) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  if (out.size() < 5 || out.compare(out.size() - 5, 5, "Error") != 0) out += "Error";
  return out;
}

py::object error_object(const Status& s) {
  py::module_ fl = py::module_::import("fabric_lib._fabric_lib");
  const std::string code(error_code_name(s.code()));
  py::object cls = py::hasattr(fl, class_name_of(code).c_str()) ? fl.attr(class_name_of(code).c_str()) : fl.attr("FabricError");
  py::object exc = cls(s.to_string());
  exc.attr("code") = code;
  exc.attr("message") = s.message();
  return exc;
}

[[noreturn]] void raise(const Status& s) {
  py::object exc = error_object(s);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}
void check(const Status& s) {
  if (!s.ok()) raise(s);
}
template <typename T>
T take(Result<T> r) {
  if (!r.ok()) raise(r.status());
  return std::move(r).value();
}

DType parse_dtype(const std::string& s) {
  static const std::pair<const char*, DType> names[] = {{"u8", DType::kU8},     {"uint8", DType::kU8},     {"f16", DType::kF16},
                                                         {"float16", DType::kF16}, {"bf16", DType::kBF16}, {"bfloat16", DType::kBF16},
                                                         {"f32", DType::kF32},   {"float32", DType::kF32},  {"f64", DType::kF64},
                                                         {"float64", DType::kF64}, {"fp8_e4m3", DType::kFp8E4M3},
                                                         {"fp8_e5m2", DType::kFp8E5M2}};
  for (auto& [n, d] : names)
    if (s == n) return d;
  raise(invalid_argument("unknown dtype '" + s + "'"));
}
KvPacking parse_packing(const std::string& s) {
  if (s == "separate") return KvPacking::kSeparate;
  if (s == "stacked") return KvPacking::kStacked;
  raise(invalid_argument("packing must be 'separate' or 'stacked'"));
}
AttentionKind parse_kind(const std::string& s) {
  if (s == "gqa") return AttentionKind::kGqa;
  if (s == "mla") return AttentionKind::kMla;
  raise(invalid_argument("kind must be 'gqa' or 'mla'"));
}

// An engine of its own for the KV roles, and the regions registered on it.
struct Engine {
  std::unique_ptr<TransferEngine> engine;
  std::vector<MrRegistration> regions;
};

struct Region {
  uint16_t index;
  uint64_t length;
};

DomainAddress address_of(const py::object& o) {
  if (py::isinstance<py::bytes>(o)) {
    std::string b = o.cast<std::string>();
    return take(DomainAddress::from_bytes(std::span(reinterpret_cast<const uint8_t*>(b.data()), b.size())));
  }
  return take(DomainAddress::from_hex(o.cast<std::string>()));
}

std::vector<MrRegistration> pick_regions(Engine& e, const std::vector<uint16_t>& indices) {
  std::vector<MrRegistration> out;
  for (uint16_t i : indices) {
    if (i >= e.regions.size()) raise(invalid_argument("unknown region " + std::to_string(i)));
    out.push_back(e.regions[i]);
  }
  return out;
}

py::dict status_dict(const RequestStatus& s) {
  py::dict d;
  d["poll"] = std::string(kv_poll_name(s.poll));
  d["ok"] = s.error.ok();
  d["code"] = std::string(error_code_name(s.error.code()));
  d["message"] = s.error.message();
  d["pages_reusable"] = s.pages_reusable;
  d["imms_expected"] = s.imms_expected;
  d["imms_arrived"] = s.imms_arrived;
  return d;
}

py::list finished_list(const std::vector<FinishedRequest>& v) {
  py::list out;
  for (const FinishedRequest& f : v) {
    py::dict d;
    d["id"] = f.id;
    d["ok"] = f.status.ok();
    d["code"] = std::string(error_code_name(f.status.code()));
    d["message"] = f.status.message();
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_kv, m) {
  m.doc() = "fabric_lib.kv native module (see fabric_lib.kv)";

  py::class_<KvLayout>(m, "KvLayout")
      .def(py::init([](const std::string& kind, const std::string& dtype, uint32_t num_layers, uint32_t page_tokens,
                       uint32_t head_dim, uint32_t kv_heads) {
             KvLayout l{parse_kind(kind), parse_dtype(dtype), num_layers, page_tokens, head_dim, kv_heads};
             check(l.validate());
             return l;
           }),
           py::arg("kind") = "gqa", py::arg("dtype") = "bf16", py::arg("num_layers"), py::arg("page_tokens"),
           py::arg("head_dim"), py::arg("kv_heads"))
      .def_readonly("num_layers", &KvLayout::num_layers)
      .def_readonly("page_tokens", &KvLayout::page_tokens)
      .def_readonly("head_dim", &KvLayout::head_dim)
      .def_readonly("kv_heads", &KvLayout::kv_heads)
      .def_property_readonly("head_page_bytes", &KvLayout::head_page_bytes)
      .def_property_readonly("fingerprint", &KvLayout::fingerprint)
      .def("heads_per_rank", [](const KvLayout& l, uint32_t tp) { return heads_per_rank(l, tp); })
      .def("first_head_of_rank", [](const KvLayout& l, uint32_t r, uint32_t tp) { return first_head_of_rank(l, r, tp); })
      .def("__repr__", [](const KvLayout& l) { return "KvLayout(" + l.to_string() + ")"; });

  py::class_<KvMemoryLayout>(m, "KvMemoryLayout")
      .def(py::init([](const std::string& packing, uint64_t page_stride, uint32_t num_pages,
                       std::vector<std::pair<uint16_t, uint64_t>> k, std::vector<std::pair<uint16_t, uint64_t>> v) {
             KvMemoryLayout mem;
             mem.packing = parse_packing(packing);
             mem.page_stride = page_stride;
             mem.num_pages = num_pages;
             for (auto [r, o] : k) mem.k.push_back({r, o});
             for (auto [r, o] : v) mem.v.push_back({r, o});
             return mem;
           }),
           py::arg("packing"), py::arg("page_stride"), py::arg("num_pages"), py::arg("k"), py::arg("v") = std::vector<std::pair<uint16_t, uint64_t>>{})
      .def_static("contiguous", [](const KvLayout& l, uint32_t tp_size, const std::string& packing, uint32_t num_pages,
                                   uint64_t base, uint16_t region) {
             uint64_t total = 0;
             KvMemoryLayout mem = KvMemoryLayout::contiguous(l, tp_size, parse_packing(packing), num_pages, base, region, &total);
             return py::make_tuple(mem, total);
           },
           py::arg("layout"), py::arg("tp_size"), py::arg("packing") = "separate", py::arg("num_pages"), py::arg("base") = 0,
           py::arg("region") = 0, "Returns (memory layout, bytes needed): layer-major, K then V buffer per layer.")
      .def_readonly("page_stride", &KvMemoryLayout::page_stride)
      .def_readonly("num_pages", &KvMemoryLayout::num_pages)
      .def_property_readonly("k", [](const KvMemoryLayout& mem) {
        std::vector<std::pair<uint16_t, uint64_t>> out;
        for (auto& b : mem.k) out.emplace_back(b.region, b.offset);
        return out;
      })
      .def_property_readonly("v", [](const KvMemoryLayout& mem) {
        std::vector<std::pair<uint16_t, uint64_t>> out;
        for (auto& b : mem.v) out.emplace_back(b.region, b.offset);
        return out;
      });

  m.def("expected_imm_count", [](const KvLayout& l, uint32_t prefill_tp, const std::string& prefill_packing, uint32_t decode_rank,
                                 uint32_t decode_tp, const std::string& decode_packing, uint32_t pages, uint64_t tail_bytes, size_t domains) {
          return take(expected_imm_count(l, prefill_tp, parse_packing(prefill_packing),
                                         {decode_rank, decode_tp, parse_packing(decode_packing)}, {pages, tail_bytes, domains}));
        },
        py::arg("layout"), py::arg("prefill_tp"), py::arg("prefill_packing") = "separate", py::arg("decode_rank"),
        py::arg("decode_tp"), py::arg("decode_packing") = "separate", py::arg("pages"), py::arg("tail_bytes"), py::arg("domains") = 1);
  m.def("sources_of", [](const KvLayout& l, uint32_t prefill_tp, uint32_t decode_rank, uint32_t decode_tp) {
          return take(sources_of(l, prefill_tp, KvPacking::kSeparate, {decode_rank, decode_tp, KvPacking::kSeparate}));
        },
        py::arg("layout"), py::arg("prefill_tp"), py::arg("decode_rank"), py::arg("decode_tp"));
  m.def("pages_for_tokens", &pages_for_tokens, py::arg("tokens"), py::arg("page_tokens"));

  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine")
      .def(py::init([](const std::string& provider, size_t domains, std::vector<std::string> interfaces, uint64_t reorder_seed,
                       size_t max_message_bytes) {
             TransferEngineBuilder b;
             b.provider(provider).domains_per_group(domains).simulate_unordered_network(reorder_seed).max_message_bytes(max_message_bytes);
             if (!interfaces.empty()) b.interfaces(interfaces);
             auto e = std::make_shared<Engine>();
             py::gil_scoped_release nogil;
             auto built = b.build();
             py::gil_scoped_acquire gil;
             e->engine = take(std::move(built));
             return e;
           }),
           py::arg("provider") = "tcp", py::arg("domains") = 1, py::arg("interfaces") = std::vector<std::string>{},
           py::arg("reorder_seed") = 0, py::arg("max_message_bytes") = 64 * 1024)
      .def_property_readonly("address", [](Engine& e) { return e.engine->main_address().to_hex(); })
      .def_property_readonly("domains", [](Engine& e) { return e.engine->num_domains(); })
      .def("register", [](Engine& e, uintptr_t ptr, size_t length, bool cuda) {
             if (e.regions.size() >= 0xFFFF) raise(resource_exhausted("too many regions"));
             py::gil_scoped_release nogil;
             auto r = e.engine->register_memory(reinterpret_cast<void*>(ptr), length, Access::kRemoteWrite,
                                                cuda ? MemoryKind::kCuda : MemoryKind::kHost);
             py::gil_scoped_acquire gil;
             e.regions.push_back(take(std::move(r)));
             return static_cast<uint16_t>(e.regions.size() - 1);
           },
           py::arg("ptr"), py::arg("length"), py::arg("cuda") = false,
           "Registers [ptr, ptr + length) (remote-writable); returns its region index.")
      .def("stop", [](Engine& e) {
        py::gil_scoped_release nogil;
        return e.engine->stop().ok();
      });

  py::class_<Decoder>(m, "Decoder")
      .def(py::init([](std::shared_ptr<Engine> e, const KvLayout& l, uint32_t tp_rank, uint32_t tp_size, const KvMemoryLayout& mem,
                       std::vector<uint16_t> regions, uint32_t heartbeat_ms, uint32_t peer_timeout_ms, uint32_t quarantine_ms,
                       uint32_t confirm_timeout_ms, uint32_t max_requests, size_t max_message_bytes) {
             DecoderOptions o;
             o.layout = l;
             o.rank = {tp_rank, tp_size, mem.packing};
             o.memory = mem;
             o.regions = pick_regions(*e, regions);
             o.liveness = {std::chrono::milliseconds(heartbeat_ms), std::chrono::milliseconds(peer_timeout_ms)};
             o.quarantine = std::chrono::milliseconds(quarantine_ms);
             o.cancel_confirm_timeout = std::chrono::milliseconds(confirm_timeout_ms);
             o.max_requests = max_requests;
             o.max_message_bytes = max_message_bytes;
             return take(Decoder::create(*e->engine, o));
           }),
           py::arg("engine"), py::arg("layout"), py::arg("tp_rank"), py::arg("tp_size"), py::arg("memory"),
           py::arg("regions") = std::vector<uint16_t>{0}, py::arg("heartbeat_ms") = 200, py::arg("peer_timeout_ms") = 2000,
           py::arg("quarantine_ms") = 5000, py::arg("confirm_timeout_ms") = 2000, py::arg("max_requests") = 4096,
           py::arg("max_message_bytes") = 64 * 1024, py::keep_alive<1, 2>())
      .def("start", [](Decoder& d, const std::string& id, std::vector<py::object> prefill_ranks, uint32_t num_tokens,
                       std::vector<uint32_t> pages, uint32_t first_page, uint16_t tail_region, uint64_t tail_offset,
                       uint64_t tail_length, uint32_t timeout_ms, const std::string& prefill_packing) {
             DecodeRequest q;
             q.id = id;
             q.prefill.tp_size = static_cast<uint32_t>(prefill_ranks.size());
             q.prefill.packing = parse_packing(prefill_packing);
             for (auto& a : prefill_ranks) q.prefill.ranks.push_back(address_of(a));
             q.num_tokens = num_tokens;
             q.pages = std::move(pages);
             q.first_page = first_page;
             q.tail_region = tail_region;
             q.tail_offset = tail_offset;
             q.tail_length = tail_length;
             q.timeout = std::chrono::milliseconds(timeout_ms);
             py::gil_scoped_release nogil;
             Status s = d.start(std::move(q));
             py::gil_scoped_acquire gil;
             check(s);
           },
           py::arg("id"), py::arg("prefill_ranks"), py::arg("num_tokens"), py::arg("pages"), py::arg("first_page") = 0,
           py::arg("tail_region") = 0, py::arg("tail_offset") = 0, py::arg("tail_length") = 0, py::arg("timeout_ms") = 30000,
           py::arg("prefill_packing") = "separate")
      .def("poll", [](const Decoder& d, const std::string& id) { return std::string(kv_poll_name(d.poll(id))); })
      .def("status", [](const Decoder& d, const std::string& id) { return status_dict(take(d.status(id))); })
      .def("cancel", [](Decoder& d, const std::string& id) { check(d.cancel(id)); })
      .def("get_finished", [](Decoder& d) { return finished_list(d.get_finished()); })
      .def("wait_finished", [](Decoder& d, uint32_t timeout_ms) {
        std::vector<FinishedRequest> f;
        {
          py::gil_scoped_release nogil;
          f = d.wait_finished(std::chrono::milliseconds(timeout_ms));
        }
        return finished_list(f);
      }, py::arg("timeout_ms"))
      .def("shutdown", [](Decoder& d, uint32_t wait_ms) {
        py::gil_scoped_release nogil;
        return d.shutdown(std::chrono::milliseconds(wait_ms)).ok();
      }, py::arg("wait_ms") = 3000)
      .def_property_readonly("address", [](const Decoder& d) { return d.address().to_hex(); })
      .def("stats", [](const Decoder& d) {
        DecoderStats s = d.stats();
        py::dict out;
        out["requests_started"] = s.requests_started;
        out["requests_succeeded"] = s.requests_succeeded;
        out["requests_failed"] = s.requests_failed;
        out["malformed_messages"] = s.malformed_messages;
        out["peers_declared_dead"] = s.peers_declared_dead;
        out["active_requests"] = s.active_requests;
        return out;
      });

  py::class_<UvmWatcher>(m, "ProgressWatcher", "A UVM word the model's stream writes progress into (Prefiller).")
      .def_property_readonly("device_ptr", [](const UvmWatcher& w) { return reinterpret_cast<uintptr_t>(w.device_ptr()); })
      .def_property_readonly("host_ptr", [](const UvmWatcher& w) { return reinterpret_cast<uintptr_t>(w.host_ptr()); })
      .def_property_readonly("value", &UvmWatcher::value)
      .def("close", [](UvmWatcher& w) {
        py::gil_scoped_release nogil;
        w.reset();
      });

  py::class_<Prefiller>(m, "Prefiller")
      .def(py::init([](std::shared_ptr<Engine> e, const KvLayout& l, uint32_t tp_rank, uint32_t tp_size, const KvMemoryLayout& mem,
                       std::vector<uint16_t> regions, uint32_t heartbeat_ms, uint32_t peer_timeout_ms, size_t max_message_bytes) {
             PrefillerOptions o;
             o.layout = l;
             o.rank = {tp_rank, tp_size, mem.packing};
             o.memory = mem;
             o.regions = pick_regions(*e, regions);
             o.liveness = {std::chrono::milliseconds(heartbeat_ms), std::chrono::milliseconds(peer_timeout_ms)};
             o.max_message_bytes = max_message_bytes;
             return take(Prefiller::create(*e->engine, o));
           }),
           py::arg("engine"), py::arg("layout"), py::arg("tp_rank"), py::arg("tp_size"), py::arg("memory"),
           py::arg("regions") = std::vector<uint16_t>{0}, py::arg("heartbeat_ms") = 200, py::arg("peer_timeout_ms") = 2000,
           py::arg("max_message_bytes") = 64 * 1024, py::keep_alive<1, 2>())
      .def("add_request", [](Prefiller& p, const std::string& id, uint32_t num_tokens, std::vector<uint32_t> pages,
                             uint16_t tail_region, uint64_t tail_offset, uint32_t timeout_ms, uint32_t decode_tp) {
             PrefillRequest q{id, num_tokens, std::move(pages), tail_region, tail_offset, std::chrono::milliseconds(timeout_ms), decode_tp};
             py::gil_scoped_release nogil;
             Status s = p.add_request(std::move(q));
             py::gil_scoped_acquire gil;
             check(s);
           },
           py::arg("id"), py::arg("num_tokens"), py::arg("pages"), py::arg("tail_region") = 0, py::arg("tail_offset") = 0,
           py::arg("timeout_ms") = 30000, py::arg("decode_tp") = 0)
      .def("begin_pass", [](Prefiller& p, std::vector<std::pair<std::string, uint32_t>> entries) {
             std::vector<PassEntry> e;
             for (auto& [id, end] : entries) e.push_back({id, end});
             return take(p.begin_pass(e));
           }, py::arg("entries"), "entries: [(request id, tokens_end)]; returns the pass id")
      .def("layer_done", [](Prefiller& p, uint64_t pass, uint32_t layer) {
        py::gil_scoped_release nogil;
        Status s = p.layer_done(pass, layer);
        py::gil_scoped_acquire gil;
        check(s);
      })
      .def("tail_ready", [](Prefiller& p, uint64_t pass) {
        py::gil_scoped_release nogil;
        Status s = p.tail_ready(pass);
        py::gil_scoped_acquire gil;
        check(s);
      })
      .def("progress", [](Prefiller& p, uint64_t pass, uint64_t value) { check(p.progress(pass, value)); })
      .def("attach_progress_watcher", [](Prefiller& p) { return take(p.attach_progress_watcher()); })
      .def_static("progress_word_value", &Prefiller::progress_word_value, py::arg("pass_id"), py::arg("progress"))
      .def("abort", [](Prefiller& p, const std::string& id) { check(p.abort(id, cancelled("aborted from Python"))); })
      .def("poll", [](const Prefiller& p, const std::string& id) { return std::string(kv_poll_name(p.poll(id))); })
      .def("status", [](const Prefiller& p, const std::string& id) { return status_dict(take(p.status(id))); })
      .def("get_finished", [](Prefiller& p) { return finished_list(p.get_finished()); })
      .def("wait_finished", [](Prefiller& p, uint32_t timeout_ms) {
        std::vector<FinishedRequest> f;
        {
          py::gil_scoped_release nogil;
          f = p.wait_finished(std::chrono::milliseconds(timeout_ms));
        }
        return finished_list(f);
      }, py::arg("timeout_ms"))
      .def("shutdown", [](Prefiller& p, uint32_t wait_ms) {
        py::gil_scoped_release nogil;
        return p.shutdown(std::chrono::milliseconds(wait_ms)).ok();
      }, py::arg("wait_ms") = 3000)
      .def_property_readonly("address", [](const Prefiller& p) { return p.address().to_hex(); })
      .def_property_readonly("num_layers", &Prefiller::num_layers)
      .def("stats", [](const Prefiller& p) {
        PrefillerStats s = p.stats();
        py::dict out;
        out["dispatches_received"] = s.dispatches_received;
        out["dispatches_rejected"] = s.dispatches_rejected;
        out["paged_writes_posted"] = s.paged_writes_posted;
        out["pages_posted"] = s.pages_posted;
        out["tail_writes_posted"] = s.tail_writes_posted;
        out["writes_completed"] = s.writes_completed;
        out["malformed_messages"] = s.malformed_messages;
        out["active_requests"] = s.active_requests;
        return out;
      });
}
