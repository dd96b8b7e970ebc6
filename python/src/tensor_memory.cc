#include "tensor_memory.h"

#include <cstring>
#include <sstream>
#include <vector>

namespace fabric_lib::python {

namespace {

// The DLPack C ABI (unversioned "dltensor" capsules, DLPack <= 0.8), as the DLPack specification
// defines it. Only the fields read here matter; the layout must match the spec exactly.
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

enum DLDeviceType : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLCUDAManaged = 13,
};
constexpr uint8_t kDLOpaqueHandle = 3;

std::string type_name(const py::object& obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

std::string shape_string(const DLTensor& t) {
  std::ostringstream s;
  s << "shape (";
  for (int32_t i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.shape[i];
  s << ")";
  if (t.strides != nullptr) {
    s << ", strides (";
    for (int32_t i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.strides[i];
    s << ") in elements";
  }
  return s.str();
}

// Device of a DLPack device type; throws ValueError for devices whose memory we cannot register.
MemoryKind kind_of_dl_device(int32_t type, const std::string& what) {
  switch (type) {
    case kDLCPU:
    case kDLCUDAHost:
      return MemoryKind::kHost;
    case kDLCUDA:
    case kDLCUDAManaged:
      return MemoryKind::kCuda;
    default:
      throw py::value_error(what + " lives on DLPack device type " + std::to_string(type) +
                            "; only CPU (1), CUDA (2), CUDA host (3) and CUDA managed (13) memory can be registered");
  }
}

TensorMemory from_dlpack(const py::object& obj) {
  const std::string what = "register_tensor: " + type_name(obj);
  if (py::hasattr(obj, "__dlpack_device__")) {
    py::tuple dev = obj.attr("__dlpack_device__")();
    kind_of_dl_device(dev[0].cast<int32_t>(), what);  // rejects unsupported devices before exporting
  }
  py::object capsule = obj.attr("__dlpack__")();
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
    throw py::type_error(what + ".__dlpack__() did not return an unused 'dltensor' capsule");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  const DLTensor& t = managed->dl_tensor;

  TensorMemory mem;
  mem.kind = kind_of_dl_device(t.device.device_type, what);
  mem.device_index = mem.kind == MemoryKind::kCuda ? t.device.device_id : -1;
  if (t.dtype.code == kDLOpaqueHandle) throw py::type_error(what + " has an opaque-handle dtype, not plain data");
  const uint64_t elem_bits = uint64_t{t.dtype.bits} * t.dtype.lanes;
  if (elem_bits == 0 || elem_bits % 8 != 0) {
    throw py::type_error(what + " has " + std::to_string(elem_bits) +
                         "-bit elements; only whole-byte element types can be registered");
  }
  const uint64_t elem_bytes = elem_bits / 8;
  uint64_t elements = 1;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) throw py::value_error(what + " has a negative dimension");
    elements *= static_cast<uint64_t>(t.shape[i]);
  }
  if (elements == 0) throw py::value_error(what + " is empty (" + shape_string(t) + "); nothing to register");
  if (t.strides != nullptr) {
    int64_t expected = 1;
    for (int32_t i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expected) {
        throw py::value_error(what + " is not C-contiguous (" + shape_string(t) +
                              "); pass a contiguous copy (numpy.ascontiguousarray(x) or x.contiguous())");
      }
      expected *= t.shape[i];
    }
  }
  mem.ptr = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  mem.nbytes = elements * elem_bytes;
  mem.writable = true;  // DLPack (<= 0.8) cannot express read-only; numpy refuses to export those
  mem.keepalive = py::make_tuple(obj, capsule);
  return mem;
}

TensorMemory from_buffer(const py::object& obj) {
  const std::string what = "register_tensor: " + type_name(obj);
  py::object view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(obj.ptr()));
  if (!view) throw py::error_already_set();
  const Py_buffer* b = PyMemoryView_GET_BUFFER(view.ptr());
  if (b->format != nullptr && std::strchr(b->format, 'O') != nullptr) {
    throw py::type_error(what + " holds Python objects (format '" + std::string(b->format) +
                         "'); only plain numeric data can be registered");
  }
  if (!PyBuffer_IsContiguous(b, 'C')) {
    throw py::value_error(what + " is not C-contiguous; pass a contiguous copy (e.g. numpy.ascontiguousarray(x))");
  }
  if (b->len <= 0) throw py::value_error(what + " is empty; nothing to register");
  TensorMemory mem;
  mem.ptr = reinterpret_cast<uintptr_t>(b->buf);
  mem.nbytes = static_cast<uint64_t>(b->len);
  mem.writable = !b->readonly;
  mem.keepalive = view;  // holds the buffer export: e.g. a bytearray cannot be resized meanwhile
  return mem;
}

}  // namespace

TensorMemory tensor_memory(const py::object& obj) {
  const bool has_buffer = PyObject_CheckBuffer(obj.ptr()) != 0;
  if (py::hasattr(obj, "__dlpack__")) {
    try {
      return from_dlpack(obj);
    } catch (py::error_already_set& e) {
      // e.g. numpy refuses to export read-only arrays through DLPack; the buffer protocol can.
      if (!has_buffer) {
        throw py::type_error("register_tensor: " + type_name(obj) + ".__dlpack__() failed: " + std::string(e.what()));
      }
    }
  }
  if (has_buffer) return from_buffer(obj);
  throw py::type_error("register_tensor: " + type_name(obj) +
                       " supports neither __dlpack__ nor the buffer protocol; pass a numpy array, a torch "
                       "tensor, bytearray, memoryview, or use register_memory(ptr, len, device)");
}

MemoryKind memory_kind_of_device(const py::object& device, int* device_index) {
  if (device_index) *device_index = -1;
  if (device.is_none()) return MemoryKind::kHost;
  if (py::isinstance<py::int_>(device) && !py::isinstance<py::bool_>(device)) {
    const long ordinal = device.cast<long>();
    if (ordinal < 0) throw py::value_error("device: a CUDA ordinal must be >= 0, got " + std::to_string(ordinal));
    if (device_index) *device_index = static_cast<int>(ordinal);
    return MemoryKind::kCuda;
  }
  const std::string s = py::str(device);
  if (s == "cpu") return MemoryKind::kHost;
  if (s == "cuda") {
    if (device_index) *device_index = 0;
    return MemoryKind::kCuda;
  }
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos) {
    if (device_index) *device_index = std::stoi(s.substr(5));
    return MemoryKind::kCuda;
  }
  throw py::value_error("device: expected 'cpu', 'cuda', 'cuda:N', a CUDA ordinal or a torch.device, got '" + s + "'");
}

}  // namespace fabric_lib::python
