// GPU benchmarks, run by scripts/device-test.sh through device_tests --bench-watcher / --bench-staging.
// Each prints a table and writes a CSV; figures are ratios or same-run comparisons, since the
// machines are shared.
#pragma once

namespace fabric_lib::device_tests {

// UVM watcher latency as GPU-timed round trips (kernels.h: fl_roundtrip_run): GPU stores i ->
// watcher callback stores i to an ack word -> GPU sees it; against a plain CPU spinner thread
// doing the same copy (the raw GPU->CPU->GPU floor over mapped memory), in the same run, by
// direct launch and by CUDA graph replay. "GPU write -> callback entry" is estimated as the
// watcher round trip minus half the raw one (no CPU/GPU clock comparison). Returns 0 on success.
int run_watcher_benchmark(const char* csv_path);

// Writes from GPU memory (staged through pinned bounce buffers) against the same writes from host
// memory, over tcp (loopback) and shm, to a peer process: GB/s and the GPU/host ratio per size.
int run_staging_benchmark(const char* csv_path);

}  // namespace fabric_lib::device_tests
