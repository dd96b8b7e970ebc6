// Finding the bytes behind a Python object: DLPack (`__dlpack__`: numpy >= 1.22, torch, cupy, ...)
// or the buffer protocol (bytes, bytearray, memoryview, array.array, read-only numpy arrays).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "fabric_lib/memory.h"

namespace fabric_lib::python {

namespace py = pybind11;

// One contiguous range of memory owned by a Python object.
struct TensorMemory {
  uintptr_t ptr = 0;
  uint64_t nbytes = 0;
  MemoryKind kind = MemoryKind::kHost;
  int device_index = -1;  // CUDA ordinal for kCuda
  bool writable = true;
  // What keeps the memory alive: the object itself and, for DLPack, the exported capsule.
  py::object keepalive;
};

// With the GIL held. Raises TypeError (no DLPack and no buffer protocol, object dtype, element
// size not a whole number of bytes) or ValueError (not C-contiguous, empty, unsupported device)
// with a message naming the problem and the fix.
TensorMemory tensor_memory(const py::object& obj);

// Maps a device argument ("cpu", "cuda", "cuda:1", an int CUDA ordinal, None, or anything whose
// str() is one of those, e.g. torch.device) to a memory kind. Raises ValueError otherwise.
MemoryKind memory_kind_of_device(const py::object& device, int* device_index = nullptr);

}  // namespace fabric_lib::python
