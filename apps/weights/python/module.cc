// pybind11 module fabric_lib.weights._fabric_lib_weights: the weights app for Python. Each
// endpoint object owns its own TransferEngine (built from provider/domains/interfaces), so the
// module needs nothing from the main extension. Memory is passed as (address, nbytes, kind) of
// host or CUDA memory that the caller keeps alive (the package's wrappers take numpy arrays and torch tensors).
// Every call that can block releases the GIL. Errors: InvalidArgument/Malformed -> ValueError,
// DeadlineExceeded -> TimeoutError, PeerUnreachable/DomainDown -> ConnectionError, others ->
// RuntimeError; the message starts with the error code's name.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <tuple>

#include "fabric_lib/weights/fp8_cuda.h"
#include "fabric_lib/weights/weights.h"

namespace py = pybind11;
namespace w = fabric_lib::weights;
using fabric_lib::ErrorCode;
using fabric_lib::Status;

namespace {

[[noreturn]] void raise(const Status& st) {
  const std::string m = st.to_string();
  switch (st.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kMalformed:
    case ErrorCode::kOutOfRange:
      throw py::value_error(m);
    case ErrorCode::kDeadlineExceeded:
      PyErr_SetString(PyExc_TimeoutError, m.c_str());
      throw py::error_already_set();
    case ErrorCode::kPeerUnreachable:
    case ErrorCode::kDomainDown:
      PyErr_SetString(PyExc_ConnectionError, m.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(m);
  }
}
void check(const Status& st) {
  if (!st.ok()) raise(st);
}
template <typename T>
T value(fabric_lib::Result<T> r) {
  if (!r.ok()) raise(r.status());
  return std::move(r).value();
}

w::DType dtype_of(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return w::DType::kBf16;
  if (s == "f32" || s == "float32") return w::DType::kF32;
  if (s == "fp8" || s == "fp8_e4m3" || s == "float8_e4m3fn") return w::DType::kFp8E4m3;
  throw py::value_error("unknown dtype '" + s + "' (bf16, f32, fp8_e4m3)");
}
w::TpSplit split_of(const std::string& s) {
  if (s == "replicated") return w::TpSplit::kReplicated;
  if (s == "rows") return w::TpSplit::kRows;
  if (s == "cols") return w::TpSplit::kCols;
  throw py::value_error("unknown split '" + s + "' (replicated, rows, cols)");
}
fabric_lib::MemoryKind memory_kind_of(const std::string& s) {
  if (s == "host") return fabric_lib::MemoryKind::kHost;
  if (s == "cuda") return fabric_lib::MemoryKind::kCuda;
  throw py::value_error("unknown memory kind '" + s + "' (host, cuda)");
}
using BoxTuple = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>;
w::Box box_of(const BoxTuple& b) { return {std::get<0>(b), std::get<1>(b), std::get<2>(b), std::get<3>(b)}; }
BoxTuple tuple_of(const w::Box& b) { return {b.r0, b.r1, b.c0, b.c1}; }

std::unique_ptr<fabric_lib::TransferEngine> make_engine(const std::string& provider, size_t domains,
                                                        const std::vector<std::string>& interfaces) {
  fabric_lib::TransferEngineBuilder b;
  b.provider(provider).domains_per_group(domains);
  if (!interfaces.empty()) b.interfaces(interfaces);
  py::gil_scoped_release nogil;
  auto e = b.build();
  if (!e.ok()) {
    py::gil_scoped_acquire gil;
    raise(e.status());
  }
  return std::move(e).value();
}

// Objects own their engine; the endpoint goes first (it unregisters), then the engine stops.
struct PyController {
  std::unique_ptr<fabric_lib::TransferEngine> engine;
  std::unique_ptr<w::Controller> controller;
  ~PyController() {
    py::gil_scoped_release nogil;
    controller.reset();
    if (engine) (void)engine->stop();
  }
};
struct PyTrainer {
  std::unique_ptr<fabric_lib::TransferEngine> engine;
  std::unique_ptr<w::TrainerEndpoint> ep;
  ~PyTrainer() {
    py::gil_scoped_release nogil;
    ep.reset();
    if (engine) (void)engine->stop();
  }
};
struct PyInference {
  std::unique_ptr<fabric_lib::TransferEngine> engine;
  std::unique_ptr<w::InferenceEndpoint> ep;
  ~PyInference() {
    py::gil_scoped_release nogil;
    ep.reset();
    if (engine) (void)engine->stop();
  }
};

py::dict stats_dict(const w::StepStats& s) {
  py::dict d;
  d["total_s"] = s.total_s;
  d["prepare_s"] = s.prepare_s;
  d["watermark_wait_s"] = s.watermark_wait_s;
  d["gather_wait_s"] = s.gather_wait_s;
  d["write_wait_s"] = s.write_wait_s;
  d["barrier_s"] = s.barrier_s;
  d["bytes_written"] = s.bytes_written;
  d["wrs"] = s.wrs;
  d["tasks"] = s.tasks;
  d["max_prepared_in_use"] = s.max_prepared_in_use;
  return d;
}

}  // namespace

PYBIND11_MODULE(_fabric_lib_weights, m) {
  m.doc() = "RL weight transfer (fabric_lib.weights): controller, trainer and inference endpoints";

  m.def("trainer_box", [](const std::string& name, const std::vector<uint64_t>& shape, uint32_t fsdp_size, uint32_t fsdp_rank,
                          uint32_t tp_size, uint32_t tp_rank, const std::string& tp_split) -> std::optional<BoxTuple> {
          w::TrainerPlacement p{fsdp_size, fsdp_rank, tp_size, tp_rank, split_of(tp_split)};
          w::Box b = value(w::trainer_box(name, shape, p));
          if (b.empty()) return std::nullopt;
          return tuple_of(b);
        },
        py::arg("name"), py::arg("shape"), py::arg("fsdp_size") = 1, py::arg("fsdp_rank") = 0, py::arg("tp_size") = 1,
        py::arg("tp_rank") = 0, py::arg("tp_split") = "replicated",
        "The (r0, r1, c0, c1) box of the 2-D view a trainer rank holds, or None when it holds no rows.");

  m.def("tp_pieces", [](const std::string& name, const std::vector<std::pair<std::string, std::vector<uint64_t>>>& sources,
                        const std::string& split, uint32_t tp, uint32_t tp_rank) {
          std::vector<w::SourceSlice> s;
          for (const auto& [n, shape] : sources) s.push_back({n, w::whole(shape)});
          w::InferenceTensor t = value(w::tp_tensor(name, s, split_of(split), tp, tp_rank, w::DType::kBf16));
          std::vector<std::tuple<std::string, BoxTuple, uint64_t, uint64_t>> pieces;
          for (const auto& p : t.pieces) pieces.emplace_back(p.source, tuple_of(p.src), p.dst_row, p.dst_col);
          return std::make_tuple(t.rows, t.cols, pieces);
        },
        py::arg("name"), py::arg("sources"), py::arg("split"), py::arg("tp") = 1, py::arg("tp_rank") = 0,
        "(rows, cols, pieces) of a destination stacked from whole sources [(name, shape)], split over TP.");

  m.def("quantize_fp8", [](py::array_t<float, py::array::c_style | py::array::forcecast> x) {
          if (x.ndim() != 2) throw py::value_error("quantize_fp8 takes a 2-D float32 array");
          const size_t rows = x.shape(0), cols = x.shape(1), br = (rows + 127) / 128, bc = (cols + 127) / 128;
          py::array_t<uint8_t> q({rows, cols});
          py::array_t<float> s({br, bc});
          w::quantize_fp8_blocks_f32(x.data(), cols, rows, cols, q.mutable_data(), cols, s.mutable_data(), bc);
          return std::make_pair(q, s);
        },
        "The CPU reference fp8 e4m3 128x128 block quantization: (fp8 bytes as uint8, f32 scales).");

  m.def("cuda_available", &w::fabric_lib_weights_cuda_available,
        "Whether this build carries the CUDA kernels (prepare on the GPU, quantize_fp8_cuda).");

  m.def("quantize_fp8_cuda", [](uintptr_t src, const std::string& src_dtype, uint64_t rows, uint64_t cols, uintptr_t q,
                                uintptr_t scales, uintptr_t stream) {
          // Dense row-major operands in device memory: src rows x cols, q rows x cols bytes,
          // scales ceil(rows/128) x ceil(cols/128) f32. Enqueued on `stream` (a cudaStream_t as an
          // integer, e.g. torch.cuda.current_stream().cuda_stream); returns once launched.
          check(w::quantize_fp8_blocks_cuda(dtype_of(src_dtype), reinterpret_cast<const void*>(src), cols, rows, cols,
                                            reinterpret_cast<uint8_t*>(q), cols, reinterpret_cast<float*>(scales),
                                            (cols + w::kFp8Block - 1) / w::kFp8Block, reinterpret_cast<void*>(stream)));
        },
        py::arg("src"), py::arg("src_dtype"), py::arg("rows"), py::arg("cols"), py::arg("q"), py::arg("scales"),
        py::arg("stream") = 0,
        "The app's CUDA fp8 kernel on device pointers (bf16/f32 source -> fp8 bytes and f32 block scales), as the GPU "
        "preparer runs it. Builds without CUDA raise RuntimeError (unsupported).");

  py::class_<PyController>(m, "Controller")
      .def(py::init([](uint32_t trainers, uint32_t inference, const std::string& provider, size_t domains,
                       const std::vector<std::string>& interfaces, double setup_timeout_s, uint64_t max_task_bytes) {
             auto c = std::make_unique<PyController>();
             c->engine = make_engine(provider, domains, interfaces);
             w::ControllerOptions o;
             o.trainers = trainers;
             o.inference = inference;
             o.setup_timeout = std::chrono::milliseconds(static_cast<int64_t>(setup_timeout_s * 1000));
             o.plan.max_task_bytes = max_task_bytes;
             c->controller = value(w::Controller::create(*c->engine, o));
             return c;
           }),
           py::arg("trainers"), py::arg("inference"), py::arg("provider") = "tcp", py::arg("domains") = 1,
           py::arg("interfaces") = std::vector<std::string>{}, py::arg("setup_timeout_s") = 60.0,
           py::arg("max_task_bytes") = uint64_t{16} << 20)
      .def_property_readonly("address", [](PyController& c) { return c.controller->address().to_hex(); })
      .def("run", [](PyController& c) {
             fabric_lib::Result<w::Schedule> s = [&] {
               py::gil_scoped_release nogil;
               return c.controller->run();
             }();
             w::Schedule sched = value(std::move(s));
             const w::ScheduleStats st = w::schedule_stats(sched);
             py::dict d;
             d["fingerprint"] = w::fingerprint(sched);
             d["tasks"] = st.tasks;
             d["staged_units"] = st.staged_units;
             d["trainer_bytes"] = st.trainer_bytes;
             d["inference_bytes"] = st.inference_bytes;
             return d;
           },
           "Gathers every rank's metadata, plans and hands out the schedule (blocks). Returns figures of the schedule.");

  py::class_<PyTrainer>(m, "Trainer")
      .def(py::init([](uint32_t rank, uint32_t world, const std::string& controller, const std::string& provider, size_t domains,
                       const std::vector<std::string>& interfaces, uint64_t watermark_bytes, double step_timeout_s,
                       bool prepare_on_gpu) {
             auto t = std::make_unique<PyTrainer>();
             t->engine = make_engine(provider, domains, interfaces);
             w::TrainerOptions o;
             o.rank = rank;
             o.world = world;
             o.controller = value(fabric_lib::DomainAddress::from_hex(controller));
             o.watermark_bytes = watermark_bytes;
             o.step_timeout = std::chrono::milliseconds(static_cast<int64_t>(step_timeout_s * 1000));
             o.prepare_on_gpu = prepare_on_gpu;
             t->ep = value(w::TrainerEndpoint::create(*t->engine, o));
             return t;
           }),
           py::arg("rank"), py::arg("world"), py::arg("controller"), py::arg("provider") = "tcp", py::arg("domains") = 1,
           py::arg("interfaces") = std::vector<std::string>{}, py::arg("watermark_bytes") = uint64_t{64} << 20,
           py::arg("step_timeout_s") = 30.0, py::arg("prepare_on_gpu") = false)
      .def("register", [](PyTrainer& t, uintptr_t ptr, size_t nbytes, const std::string& kind) {
             const fabric_lib::MemoryKind k = memory_kind_of(kind);
             fabric_lib::Result<uint32_t> r = [&] {
               py::gil_scoped_release nogil;
               return t.ep->add_region(reinterpret_cast<void*>(ptr), nbytes, k);
             }();
             return value(std::move(r));
           }, py::arg("address"), py::arg("nbytes"), py::arg("kind") = "host",
           "Registers memory holding shards (kind 'host' or 'cuda'); returns its region index.")
      .def("add_shard", [](PyTrainer& t, const std::string& name, const std::vector<uint64_t>& shape, const std::string& dtype,
                           const BoxTuple& box, uint32_t region, uint64_t offset) {
             check(t.ep->add_shard(w::TrainerShard{name, shape, dtype_of(dtype), box_of(box), region, offset}));
           }, py::arg("name"), py::arg("global_shape"), py::arg("dtype"), py::arg("box"), py::arg("region"), py::arg("offset") = 0)
      .def("connect", [](PyTrainer& t) {
             Status st;
             {
               py::gil_scoped_release nogil;
               st = t.ep->connect();
             }
             check(st);
           })
      .def("send", [](PyTrainer& t, uint64_t version) {
             Status st;
             {
               py::gil_scoped_release nogil;
               st = t.ep->send(version);
             }
             check(st);
             return stats_dict(t.ep->last_step());
           }, py::arg("version"), "Writes `version` from the shards' current contents; blocks until it is complete everywhere.")
      .def_property_readonly("fingerprint", [](PyTrainer& t) { return t.ep->setup().fingerprint; });

  py::class_<PyInference>(m, "Inference")
      .def(py::init([](uint32_t rank, uint32_t world, const std::string& controller, const std::string& provider, size_t domains,
                       const std::vector<std::string>& interfaces) {
             auto i = std::make_unique<PyInference>();
             i->engine = make_engine(provider, domains, interfaces);
             w::InferenceOptions o;
             o.rank = rank;
             o.world = world;
             o.controller = value(fabric_lib::DomainAddress::from_hex(controller));
             i->ep = value(w::InferenceEndpoint::create(*i->engine, o));
             return i;
           }),
           py::arg("rank"), py::arg("world"), py::arg("controller"), py::arg("provider") = "tcp", py::arg("domains") = 1,
           py::arg("interfaces") = std::vector<std::string>{})
      .def("register", [](PyInference& i, uintptr_t ptr, size_t nbytes, const std::string& kind) {
             const fabric_lib::MemoryKind k = memory_kind_of(kind);
             fabric_lib::Result<uint32_t> r = [&] {
               py::gil_scoped_release nogil;
               return i.ep->add_region(reinterpret_cast<void*>(ptr), nbytes, k);
             }();
             return value(std::move(r));
           }, py::arg("address"), py::arg("nbytes"), py::arg("kind") = "host",
           "Registers memory for remote writes (kind 'host' or 'cuda'); returns its region index.")
      .def("add_tensor", [](PyInference& i, const std::string& name, uint64_t rows, uint64_t cols, const std::string& dtype,
                            const std::vector<std::tuple<std::string, BoxTuple, uint64_t, uint64_t>>& pieces, uint32_t region,
                            uint64_t offset, uint32_t scale_region, uint64_t scale_offset) {
             w::InferenceTensor t{name, rows, cols, dtype_of(dtype), {}, region, offset, scale_region, scale_offset};
             for (const auto& [src, box, r, c] : pieces) t.pieces.push_back({src, box_of(box), r, c});
             check(i.ep->add_tensor(std::move(t)));
           }, py::arg("name"), py::arg("rows"), py::arg("cols"), py::arg("dtype"), py::arg("pieces"), py::arg("region"),
           py::arg("offset") = 0, py::arg("scale_region") = 0, py::arg("scale_offset") = 0)
      .def("connect", [](PyInference& i) {
             Status st;
             {
               py::gil_scoped_release nogil;
               st = i.ep->connect();
             }
             check(st);
           })
      .def("wait_for_version", [](PyInference& i, uint64_t version, double timeout_s) {
             Status st;
             {
               py::gil_scoped_release nogil;
               st = i.ep->wait_for_version(version, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
             }
             check(st);
           }, py::arg("version"), py::arg("timeout_s") = 30.0,
           "Returns once `version` is completely written here; raises TimeoutError (or another error) otherwise.")
      .def_property_readonly("fingerprint", [](PyInference& i) { return i.ep->setup().fingerprint; });
}
