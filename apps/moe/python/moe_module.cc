// fabric_lib.moe._moe: the pybind11 module under python/fabric_lib/moe (the P2PAllToAll class
// there is the user API). A Context owns a TransferEngine and an AllToAll; the halves take raw
// pointers and element strides (the Python side passes tensors' data_ptr() and stride()), and
// release the GIL while they run (on CPU ranks they wait for peers).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/moe/all_to_all.h"

namespace py = pybind11;
using namespace fabric_lib;
using namespace fabric_lib::moe;

namespace {

py::object g_error;  // fabric_lib.moe._moe.MoeError

[[noreturn]] void raise(const Status& s) {
  py::object e = g_error(s.to_string());
  e.attr("code") = std::string(error_code_name(s.code()));
  PyErr_SetObject(g_error.ptr(), e.ptr());
  throw py::error_already_set();
}

void check(const Status& s) {
  if (!s.ok()) raise(s);
}

DType dtype_of(const std::string& s) {
  if (s == "fp8" || s == "fp8_e4m3" || s == "float8_e4m3fn" || s == "uint8") return DType::kFp8E4M3;
  if (s == "bf16" || s == "bfloat16") return DType::kBf16;
  if (s == "fp16" || s == "float16") return DType::kFp16;
  if (s == "fp32" || s == "float32") return DType::kFp32;
  throw py::value_error("unknown dtype " + s);
}

template <typename T>
T get(const py::dict& d, const char* key, T dflt) {
  if (!d.contains(key) || d[key].is_none()) return dflt;
  return d[key].cast<T>();
}

template <typename T>
T* ptr(uint64_t p) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(p));
}

class Context {
 public:
  Context(const py::dict& cfg, const std::string& provider, uint32_t domains, int device, uint64_t reorder_seed) {
    MoeConfig c;
    c.max_num_tokens = get<uint32_t>(cfg, "max_num_tokens", 0);
    c.num_experts = get<uint32_t>(cfg, "num_experts", 0);
    c.experts_per_token = get<uint32_t>(cfg, "experts_per_token", 0);
    c.hidden_dim = get<uint32_t>(cfg, "hidden_dim", 0);
    c.hidden_dim_scale = get<uint32_t>(cfg, "hidden_dim_scale", 0);
    c.in_dtype = dtype_of(get<std::string>(cfg, "in_dtype", "bf16"));
    c.out_dtype = dtype_of(get<std::string>(cfg, "out_dtype", "bf16"));
    c.expert_padding = get<uint32_t>(cfg, "expert_padding", 1);
    c.world_size = get<uint32_t>(cfg, "world_size", 1);
    c.rank = get<uint32_t>(cfg, "rank", 0);
    c.max_private_tokens = get<uint32_t>(cfg, "max_private_tokens", kAuto);
    c.overflow_tokens = get<uint32_t>(cfg, "overflow_tokens", kAuto);
    c.path = get<std::string>(cfg, "path", "proxy") == "direct" ? Path::kDirect : Path::kProxy;
    c.imm_base = get<uint32_t>(cfg, "imm_base", c.imm_base);
    c.step_timeout = std::chrono::milliseconds(get<uint64_t>(cfg, "step_timeout_ms", 10000));
    c.proxy_cpu = get<int>(cfg, "proxy_cpu", -1);
    c.proxy_idle = get<bool>(cfg, "proxy_spin", false) ? IdlePolicy::kSpin : IdlePolicy::kAdaptive;
    TransferEngineBuilder b;
    b.provider(provider).domains_per_group(domains).simulate_unordered_network(reorder_seed);
    Result<std::unique_ptr<TransferEngine>> e = b.build();
    if (!e.ok()) raise(e.status());
    engine_ = std::move(e).value();
    Result<std::unique_ptr<AllToAll>> a = AllToAll::create(c, *engine_, device);
    if (!a.ok()) raise(a.status());
    a2a_ = std::move(a).value();
  }
  ~Context() { close(); }

  py::bytes local_info() const {
    const std::vector<uint8_t> b = live().local_info();
    return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
  }
  void connect(const std::vector<std::string>& infos) {
    std::vector<std::vector<uint8_t>> v;
    for (const std::string& s : infos) v.emplace_back(s.begin(), s.end());
    check(live().connect(v));
  }
  void dispatch_send(uint64_t x, size_t x_stride, uint64_t x_scale, size_t scale_stride_token, size_t scale_stride_elem,
                     uint64_t indices, size_t indices_stride, uint32_t num_tokens, uint64_t bound_m, uint64_t stream) {
    DispatchSendArgs a;
    a.x = ptr<const void>(x);
    a.x_stride = x_stride;
    a.x_scale = ptr<const float>(x_scale);
    a.x_scale_stride_token = scale_stride_token;
    a.x_scale_stride_elem = scale_stride_elem;
    a.indices = ptr<const uint32_t>(indices);
    a.indices_stride = indices_stride;
    a.num_tokens = num_tokens;
    a.bound_m = ptr<const int32_t>(bound_m);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live().dispatch_send(a, ptr<void>(stream));
    }
    check(s);
  }
  void dispatch_recv(uint64_t num_tokens_out, uint64_t x, size_t x_stride, uint32_t rows, uint64_t x_scale,
                     size_t scale_stride_token, size_t scale_stride_elem, uint64_t stream) {
    DispatchRecvArgs a;
    a.out_expert_num_tokens = ptr<int32_t>(num_tokens_out);
    a.out_expert_x = ptr<void>(x);
    a.out_x_stride = x_stride;
    a.out_rows = rows;
    a.out_expert_x_scale = ptr<float>(x_scale);
    a.out_scale_stride_token = scale_stride_token;
    a.out_scale_stride_elem = scale_stride_elem;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live().dispatch_recv(a, ptr<void>(stream));
    }
    check(s);
  }
  void combine_send(uint64_t y, size_t y_stride, uint32_t rows, uint64_t stream) {
    CombineSendArgs a;
    a.expert_y = ptr<const void>(y);
    a.expert_y_stride = y_stride;
    a.rows = rows;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live().combine_send(a, ptr<void>(stream));
    }
    check(s);
  }
  void combine_recv(uint64_t out, size_t out_stride, uint64_t weights, size_t weights_stride, uint32_t num_tokens,
                    uint64_t bound_m, uint64_t stream) {
    CombineRecvArgs a;
    a.out_tokens = ptr<void>(out);
    a.out_stride = out_stride;
    a.weights = ptr<const float>(weights);
    a.weights_stride = weights_stride;
    a.num_tokens = num_tokens;
    a.bound_m = ptr<const int32_t>(bound_m);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live().combine_recv(a, ptr<void>(stream));
    }
    check(s);
  }
  void finish(uint64_t timeout_ms) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live().finish(std::chrono::milliseconds(timeout_ms));
    }
    check(s);
  }
  std::string status() const { return live().status().to_string(); }
  py::dict geometry() const {
    const Geometry& g = live().geometry();
    py::dict d;
    d["local_experts"] = g.local_experts;
    d["max_recv_tokens"] = g.max_recv_tokens;
    d["private_tokens"] = g.private_tokens;
    d["overflow_tokens"] = g.overflow_tokens;
    d["buffer_bytes"] = live().buffers().total();
    d["buffer_report"] = live().buffers().describe(g);
    d["domains"] = engine_->num_domains();
    d["on_gpu"] = live().on_gpu();
    return d;
  }
  py::list proxy_times() {
    py::list out;
    for (const ProxyStepTimes& t : live().take_proxy_times()) {
      py::dict d;
      d["step"] = t.step;
      d["routes_seen_ns"] = t.routes_seen_ns;
      d["routes_posted_ns"] = t.routes_posted_ns;
      d["private_posted_ns"] = t.private_posted_ns;
      d["routes_arrived_ns"] = t.routes_arrived_ns;
      d["overflow_posted_ns"] = t.overflow_posted_ns;
      d["combine_posted_ns"] = t.combine_posted_ns;
      d["done_ns"] = t.done_ns;
      d["posting_ns"] = t.posting_ns;
      out.append(d);
    }
    return out;
  }
  void close() {
    py::gil_scoped_release nogil;
    a2a_.reset();
    if (engine_) engine_->stop();
    engine_.reset();
  }

 private:
  AllToAll& live() const {
    if (!a2a_) throw py::value_error("the all-to-all was destroyed");
    return *a2a_;
  }
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<AllToAll> a2a_;
};

}  // namespace

PYBIND11_MODULE(_moe, m) {
  m.doc() = "fabric_lib.moe native part: use fabric_lib.moe.P2PAllToAll";
  g_error = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "fabric_lib.moe._moe.MoeError", "A failed MoE all-to-all call (attribute code: the error name)", PyExc_RuntimeError,
      nullptr));
  m.attr("MoeError") = g_error;
  py::class_<Context>(m, "Context")
      .def(py::init<const py::dict&, const std::string&, uint32_t, int, uint64_t>(), py::arg("config"),
           py::arg("provider"), py::arg("domains"), py::arg("device"), py::arg("reorder_seed") = 0)
      .def("local_info", &Context::local_info)
      .def("connect", &Context::connect)
      .def("dispatch_send", &Context::dispatch_send)
      .def("dispatch_recv", &Context::dispatch_recv)
      .def("combine_send", &Context::combine_send)
      .def("combine_recv", &Context::combine_recv)
      .def("finish", &Context::finish, py::arg("timeout_ms"))
      .def("status", &Context::status)
      .def("geometry", &Context::geometry)
      .def("proxy_times", &Context::proxy_times)
      .def("close", &Context::close);
}
