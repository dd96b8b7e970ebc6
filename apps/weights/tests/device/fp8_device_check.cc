// GPU check of the fp8 block quantization kernel (run on the GPU machine, see scripts/device-weights.sh):
// every case is quantized by the CUDA kernel and by the CPU reference, and the bytes and scale
// bits must be equal. Each case's input and the kernel's output are written to OUT_DIR for
// check_fp8_torch.py, which compares them with torch's float8_e4m3fn on the GPU.
//   usage: weights_fp8_device_check OUT_DIR
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fabric_lib/weights/fp8.h"
#include "fabric_lib/weights/fp8_cuda.h"

namespace w = fabric_lib::weights;

namespace {

struct Case {
  std::string name;
  size_t rows, cols, pitch;
  bool bf16;
  int kind;  // 0 normal random, 1 wide exponent range, 2 specials (zero block, NaN, inf, subnormals, ties)
};

std::vector<float> make_values(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 12);
  std::vector<float> x(c.rows * c.pitch, 0.0f);
  for (size_t r = 0; r < c.rows; ++r) {
    for (size_t col = 0; col < c.cols; ++col) {
      float v = n(rng) * 0.02f;
      if (c.kind >= 1) v = std::ldexp(n(rng), e(rng));
      x[r * c.pitch + col] = v;
    }
  }
  if (c.kind == 2) {
    for (size_t r = 0; r < std::min<size_t>(128, c.rows); ++r) {
      for (size_t col = 0; col < std::min<size_t>(128, c.cols); ++col) x[r * c.pitch + col] = (r + col) % 3 ? 0.0f : -0.0f;
    }
    if (c.rows > 130 && c.cols > 130) x[130 * c.pitch + 130] = std::numeric_limits<float>::quiet_NaN();
    if (c.rows > 130 && c.cols > 300) x[129 * c.pitch + 290] = -std::numeric_limits<float>::infinity();
    // A block whose quotients land on e4m3 midpoints and in the subnormal range.
    if (c.rows >= 256 && c.cols >= 512) {
      for (size_t r = 128; r < 256; ++r) {
        for (size_t col = 384; col < 512; ++col) {
          const float mids[] = {448.0f, 1.0625f, 1.1875f, -3.25f, std::ldexp(1.0f, -10), std::ldexp(3.0f, -10), 0.0017f, 17.0f};
          x[r * c.pitch + col] = mids[(r * 7 + col) % 8];
        }
      }
    }
  }
  if (c.bf16) {
    for (float& v : x) v = w::bf16_to_f32(w::f32_to_bf16(v));
  }
  return x;
}

bool write_file(const std::string& path, const void* p, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  return static_cast<bool>(f);
}

#define CUDA_OK(x)                                                                   \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                  \
      return false;                                                                  \
    }                                                                                \
  } while (0)

bool run_case(const Case& c, const std::string& out_dir, std::ofstream& manifest) {
  const std::vector<float> xf = make_values(c, static_cast<uint32_t>(c.rows * 131 + c.cols));
  const size_t es = c.bf16 ? 2 : 4;
  std::vector<uint8_t> src(c.rows * c.pitch * es);
  for (size_t i = 0; i < xf.size(); ++i) {
    if (c.bf16) {
      const uint16_t b = w::f32_to_bf16(xf[i]);
      std::memcpy(src.data() + i * 2, &b, 2);
    } else {
      std::memcpy(src.data() + i * 4, &xf[i], 4);
    }
  }
  const size_t sr = (c.rows + 127) / 128, sc = (c.cols + 127) / 128;
  std::vector<uint8_t> q_cpu(c.rows * c.cols), q_gpu(c.rows * c.cols);
  std::vector<float> s_cpu(sr * sc), s_gpu(sr * sc);
  if (c.bf16) {
    w::quantize_fp8_blocks_bf16(reinterpret_cast<const uint16_t*>(src.data()), c.pitch, c.rows, c.cols, q_cpu.data(), c.cols, s_cpu.data(), sc);
  } else {
    w::quantize_fp8_blocks_f32(reinterpret_cast<const float*>(src.data()), c.pitch, c.rows, c.cols, q_cpu.data(), c.cols, s_cpu.data(), sc);
  }
  void *d_src, *d_q, *d_s;
  CUDA_OK(cudaMalloc(&d_src, src.size()));
  CUDA_OK(cudaMalloc(&d_q, q_gpu.size()));
  CUDA_OK(cudaMalloc(&d_s, s_gpu.size() * 4));
  CUDA_OK(cudaMemcpy(d_src, src.data(), src.size(), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  fabric_lib::Status st = w::quantize_fp8_blocks_cuda(c.bf16 ? w::DType::kBf16 : w::DType::kF32, d_src, c.pitch, c.rows,
                                                      c.cols, static_cast<uint8_t*>(d_q), c.cols, static_cast<float*>(d_s), sc, stream);
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", c.name.c_str(), st.to_string().c_str());
    return false;
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(q_gpu.data(), d_q, q_gpu.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(s_gpu.data(), d_s, s_gpu.size() * 4, cudaMemcpyDeviceToHost));
  cudaFree(d_src);
  cudaFree(d_q);
  cudaFree(d_s);
  cudaStreamDestroy(stream);
  size_t bad_q = 0, bad_s = 0;
  for (size_t i = 0; i < q_cpu.size(); ++i) bad_q += q_cpu[i] != q_gpu[i];
  for (size_t i = 0; i < s_cpu.size(); ++i) bad_s += w::f32_to_bits(s_cpu[i]) != w::f32_to_bits(s_gpu[i]);
  const std::string base = out_dir + "/" + c.name;
  const bool wrote = write_file(base + ".in", src.data(), src.size()) && write_file(base + ".q", q_gpu.data(), q_gpu.size()) &&
                     write_file(base + ".s", s_gpu.data(), s_gpu.size() * 4);
  manifest << c.name << " " << c.rows << " " << c.cols << " " << c.pitch << " " << (c.bf16 ? "bf16" : "f32") << "\n";
  std::printf("%-28s %5zux%-5zu %s  fp8 bytes differing: %zu/%zu  scales differing: %zu/%zu  %s\n", c.name.c_str(), c.rows,
              c.cols, c.bf16 ? "bf16" : "f32 ", bad_q, q_cpu.size(), bad_s, s_cpu.size(),
              bad_q == 0 && bad_s == 0 && wrote ? "ok" : "FAILED");
  return bad_q == 0 && bad_s == 0 && wrote;
}

// The per-stage rates fabric-weights-bench projects with: pinned H2D and the kernel's throughput
// in GB/s of bf16 input, on a DeepSeek-V3 dense MLP weight (18432 x 7168 bf16, 264 MB).
bool measure_rates() {
  const size_t rows = 18432, cols = 7168, bytes = rows * cols * 2;
  void *host, *d_src, *d_q, *d_s;
  CUDA_OK(cudaMallocHost(&host, bytes));
  std::memset(host, 0x3c, bytes);  // finite bf16 values
  CUDA_OK(cudaMalloc(&d_src, bytes));
  CUDA_OK(cudaMalloc(&d_q, rows * cols));
  CUDA_OK(cudaMalloc(&d_s, (rows / 128) * (cols / 128) * 4));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  float h2d_ms = 1e30f, q_ms = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {  // best of 5 (the first warms up)
    float ms;
    CUDA_OK(cudaEventRecord(a, stream));
    CUDA_OK(cudaMemcpyAsync(d_src, host, bytes, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaEventRecord(b, stream));
    CUDA_OK(cudaEventSynchronize(b));
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    h2d_ms = std::min(h2d_ms, ms);
    CUDA_OK(cudaEventRecord(a, stream));
    if (!w::quantize_fp8_blocks_cuda(w::DType::kBf16, d_src, cols, rows, cols, static_cast<uint8_t*>(d_q), cols,
                                     static_cast<float*>(d_s), cols / 128, stream).ok()) {
      return false;
    }
    CUDA_OK(cudaEventRecord(b, stream));
    CUDA_OK(cudaEventSynchronize(b));
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    q_ms = std::min(q_ms, ms);
  }
  std::printf("rates (best of 5, %zu MB bf16): pinned H2D %.1f GB/s, fp8 quantization %.1f GB/s of bf16 input\n",
              bytes >> 20, bytes / (h2d_ms * 1e6), bytes / (q_ms * 1e6));
  std::printf("  -> fabric-weights-bench --h2d-gbs %.1f --quant-gbs %.1f\n", bytes / (h2d_ms * 1e6), bytes / (q_ms * 1e6));
  cudaFreeHost(host);
  cudaFree(d_src);
  cudaFree(d_q);
  cudaFree(d_s);
  cudaStreamDestroy(stream);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  if (!w::fabric_lib_weights_cuda_available()) {
    std::fprintf(stderr, "fabric_lib_weights was built without CUDA\n");
    return 2;
  }
  const std::string out = argv[1];
  std::ofstream manifest(out + "/manifest.txt");
  const std::vector<Case> cases = {
      {"tiny_bf16", 1, 1, 1, true, 0},
      {"one_block_bf16", 128, 128, 128, true, 0},
      {"edges_pitched_bf16", 200, 300, 320, true, 1},
      {"specials_bf16", 256, 640, 640, true, 2},
      {"specials_f32", 256, 640, 700, false, 2},
      {"wide_range_f32", 333, 517, 517, false, 1},
      {"dsv3_expert_down_bf16", 7168, 2048, 2048, true, 0},
      {"kimi_q_b_bf16", 1536, 8192, 8192, true, 1},
  };
  size_t passed = 0, failed = 0;
  for (const Case& c : cases) (run_case(c, out, manifest) ? passed : failed)++;
  if (failed == 0 && !measure_rates()) ++failed;
  std::printf("%zu passed, %zu failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
