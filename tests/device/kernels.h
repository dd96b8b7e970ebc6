// Kernels of the GPU tests and benchmarks, behind a plain host interface (C++17, no CUDA types
// beyond an opaque stream), so the test logic stays in C++20 .cc files and Python can call the
// round-trip benchmark through ctypes (extern "C" part).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabric_lib::device_tests {

// "Layers" of a model: one thread busy-waits `busy_ns`, then publishes progress with a release
// store to `word` (a UvmWatcher's device_ptr), `layers` times. Values continue across launches:
// launch k (counted in `*epoch`, device memory, starting at 0) writes k*layers+1 .. (k+1)*layers,
// so every launch or graph replay ends at a multiple of `layers` and values only grow.
int launch_layer_bumps(uint64_t* word, uint64_t* epoch, int layers, uint32_t busy_ns, void* stream);

// Waits (one thread) for *flag == value (or error_value, or `timeout_ns`), then every thread
// checks data[0..length) against pattern `seed` (common/pattern.h's pattern_byte). result[0] =
// FlagWait outcome (0 set, 1 error, 2 timeout), result[1] = mismatching bytes, result[2] = the
// first mismatching index (UINT64_MAX when none). `result` is device memory of 3 words, zeroed
// and set by the kernel.
int launch_flag_then_check(const uint64_t* flag, uint64_t value, uint64_t error_value, uint64_t timeout_ns,
                           const uint8_t* data, uint64_t length, uint64_t seed, uint64_t* result, void* stream);

// Fills device memory with pattern `seed` (to make GPU sources, and to check the device's pattern
// function against the host's).
int launch_fill_pattern(uint8_t* data, uint64_t length, uint64_t seed, void* stream);

// cudaError_t as text.
const char* error_text(int error);

}  // namespace fabric_lib::device_tests

extern "C" {
// The watcher latency benchmark (also used from Python through ctypes): `iterations` round trips,
// each a kernel (direct launch, or replay of a one-kernel CUDA graph when use_graph != 0) that
// stores i to `word`, then spins until `ack` == i. Whoever watches `word` must copy each value to
// `ack` (a UvmWatcher callback, or a plain CPU spinner). Every sample is timed on the GPU alone
// (clock64, converted with a globaltimer calibration), so no CPU/GPU clock comparison enters.
// out_ns[iterations] receives the round trips in ns; out_globaltimer_ns (may be null) the same
// measured with %globaltimer (coarser on some GPUs; a cross-check). `word` and `ack` are device
// pointers of mapped words; `word` is left at `iterations`. Returns 0, a cudaError_t, or -1 when
// an ack did not come within timeout_ns.
int fl_roundtrip_run(uint64_t* word, const uint64_t* ack, int iterations, int use_graph, uint64_t timeout_ns,
                     double* out_ns, double* out_globaltimer_ns);
}
