// GpuRank (gpu_rank.h).
#include "gpu_rank.h"

#include <cstring>
#include <string>

#include "expert_kernel.h"
#include "fabric_lib/memory.h"

namespace fabric_lib::moe::testing {
namespace {

Status cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return Status(ErrorCode::kProviderError, std::string(what) + ": " + cudaGetErrorString(e));
}

constexpr uint8_t kUntouched = 0xCD;

}  // namespace

GpuRank::GpuRank(AllToAll& a2a, cudaStream_t stream)
    : a2a_(a2a), stream_(stream), c_(a2a.config()), g_(a2a.geometry()) {}

GpuRank::~GpuRank() {
  for (void* p : allocations_) cudaFree(p);
}

Status GpuRank::allocate() {
  auto alloc = [&](auto*& out, size_t bytes) -> Status {
    void* p = nullptr;
    FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMalloc(&p, peer_written_cuda_bytes(bytes == 0 ? 16 : bytes)), "cudaMalloc"));
    allocations_.push_back(p);
    out = static_cast<std::remove_reference_t<decltype(out)>>(p);
    return ok_status();
  };
  const size_t M = g_.max_tokens, R = g_.max_recv_tokens, H = g_.hidden, S = g_.hidden_scale, K = g_.top_k;
  FABRIC_LIB_RETURN_IF_ERROR(alloc(x_, M * H * g_.in_size));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(scales_, M * S * 4));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(indices_, M * K * 4));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(weights_, M * K * 4));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(bound_m_, 4));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(counts_, g_.local_experts * 4));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(out_x_, R * H * g_.in_size));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(out_s_, R * S * 4));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(y_, R * H * g_.out_size));
  FABRIC_LIB_RETURN_IF_ERROR(alloc(out_, M * H * g_.out_size));
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemset(y_, 0xFF, R * H * g_.out_size), "memset"));  // NaN gaps
  return cuda(load_expert_kernel(), "loading the expert kernel");
}

Status GpuRank::upload(const TokenBatch& mine) {
  const size_t M = g_.max_tokens, H = g_.hidden, S = g_.hidden_scale, K = g_.top_k;
  TokenBatch given = mine;
  given.x.resize(M * H * g_.in_size, 0x7E);  // garbage past the valid rows
  given.scales.resize(M * S, 1e30f);
  given.indices.resize(M * K, 0xFFFFFFFFu);
  given.weights.resize(M * K, 1e30f);
  tokens_ = mine.tokens;
  const int32_t m = static_cast<int32_t>(mine.tokens);
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpyAsync(x_, given.x.data(), given.x.size(), cudaMemcpyHostToDevice, stream_), "H2D"));
  if (S) {
    FABRIC_LIB_RETURN_IF_ERROR(
        cuda(cudaMemcpyAsync(scales_, given.scales.data(), M * S * 4, cudaMemcpyHostToDevice, stream_), "H2D"));
  }
  FABRIC_LIB_RETURN_IF_ERROR(
      cuda(cudaMemcpyAsync(indices_, given.indices.data(), M * K * 4, cudaMemcpyHostToDevice, stream_), "H2D"));
  FABRIC_LIB_RETURN_IF_ERROR(
      cuda(cudaMemcpyAsync(weights_, given.weights.data(), M * K * 4, cudaMemcpyHostToDevice, stream_), "H2D"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpyAsync(bound_m_, &m, 4, cudaMemcpyHostToDevice, stream_), "H2D"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemsetAsync(out_, kUntouched, M * H * g_.out_size, stream_), "memset"));
  return sync();  // the host vectors go out of scope
}

Status GpuRank::issue_step_timed(cudaEvent_t ev[6]) {
  const size_t H = g_.hidden, S = g_.hidden_scale, K = g_.top_k;
  auto mark = [&](int i) { return ev ? cuda(cudaEventRecord(ev[i], stream_), "event") : ok_status(); };
  DispatchSendArgs ds;
  ds.x = x_;
  ds.x_stride = H;
  ds.x_scale = S ? scales_ : nullptr;
  ds.x_scale_stride_token = S;
  ds.indices = indices_;
  ds.indices_stride = K;
  ds.num_tokens = g_.max_tokens;
  ds.bound_m = bound_m_;
  FABRIC_LIB_RETURN_IF_ERROR(mark(0));
  FABRIC_LIB_RETURN_IF_ERROR(a2a_.dispatch_send(ds, stream_));
  FABRIC_LIB_RETURN_IF_ERROR(mark(1));
  DispatchRecvArgs dr;
  dr.out_expert_num_tokens = counts_;
  dr.out_expert_x = out_x_;
  dr.out_x_stride = H;
  dr.out_rows = g_.max_recv_tokens;
  dr.out_expert_x_scale = S ? out_s_ : nullptr;
  dr.out_scale_stride_token = S;
  FABRIC_LIB_RETURN_IF_ERROR(a2a_.dispatch_recv(dr, stream_));
  FABRIC_LIB_RETURN_IF_ERROR(mark(2));
  ExpertArgs ea{out_x_, S ? out_s_ : nullptr, counts_, y_, g_.max_recv_tokens, g_.hidden, g_.hidden_scale,
                g_.local_experts, g_.rank * g_.local_experts, g_.padding,
                static_cast<uint32_t>(c_.in_dtype == DType::kFp8E4M3 ? 1 : g_.in_size), g_.out_size == 4};
  FABRIC_LIB_RETURN_IF_ERROR(cuda(launch_expert(ea, stream_), "expert kernel"));
  FABRIC_LIB_RETURN_IF_ERROR(mark(3));
  CombineSendArgs cs;
  cs.expert_y = y_;
  cs.expert_y_stride = H;
  cs.rows = g_.max_recv_tokens;
  FABRIC_LIB_RETURN_IF_ERROR(a2a_.combine_send(cs, stream_));
  FABRIC_LIB_RETURN_IF_ERROR(mark(4));
  CombineRecvArgs cr;
  cr.out_tokens = out_;
  cr.out_stride = H;
  cr.weights = weights_;
  cr.weights_stride = K;
  cr.num_tokens = g_.max_tokens;
  cr.bound_m = bound_m_;
  FABRIC_LIB_RETURN_IF_ERROR(a2a_.combine_recv(cr, stream_));
  return mark(5);
}

Status GpuRank::issue_step() { return issue_step_timed(nullptr); }

Status GpuRank::sync() { return cuda(cudaStreamSynchronize(stream_), "stream"); }

Status GpuRank::check(uint64_t step, const std::vector<TokenBatch>& all, uint64_t& digest) {
  FABRIC_LIB_RETURN_IF_ERROR(sync());
  FABRIC_LIB_RETURN_IF_ERROR(a2a_.status());
  const size_t H = g_.hidden, S = g_.hidden_scale, xb = H * g_.in_size, ob = H * g_.out_size;
  const DispatchExpect want = reference_dispatch(c_, c_.rank, all);
  std::vector<int32_t> counts(g_.local_experts);
  std::vector<uint8_t> out_x(size_t{want.rows} * xb), out(size_t{g_.max_tokens} * ob);
  std::vector<float> out_s(size_t{want.rows} * S);
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpy(counts.data(), counts_, counts.size() * 4, cudaMemcpyDeviceToHost), "D2H"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpy(out_x.data(), out_x_, out_x.size(), cudaMemcpyDeviceToHost), "D2H"));
  if (S) FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpy(out_s.data(), out_s_, out_s.size() * 4, cudaMemcpyDeviceToHost), "D2H"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpy(out.data(), out_, out.size(), cudaMemcpyDeviceToHost), "D2H"));
  auto mismatch = [&](const std::string& what) {
    return internal_error("mismatch at step " + std::to_string(step) + ": " + what);
  };
  for (uint32_t e = 0; e < g_.local_experts; ++e) {
    if (counts[e] != want.counts[e]) return mismatch("expert " + std::to_string(e) + " count");
  }
  for (uint32_t row = 0; row < want.rows; ++row) {
    if (want.expert_of[row] == UINT32_MAX) continue;
    if (std::memcmp(out_x.data() + row * xb, want.x.data() + row * xb, xb) != 0 ||
        std::memcmp(out_s.data() + size_t{row} * S, want.scales.data() + size_t{row} * S, S * 4) != 0) {
      return mismatch("dispatched row " + std::to_string(row));
    }
  }
  const TokenBatch& mine = all[c_.rank];
  const std::vector<uint8_t> ref = reference_combine(c_, mine);
  for (uint32_t t = 0; t < mine.tokens; ++t) {
    if (std::memcmp(out.data() + t * ob, ref.data() + t * ob, ob) != 0) return mismatch("combined token " + std::to_string(t));
  }
  for (size_t i = size_t{mine.tokens} * ob; i < out.size(); ++i) {
    if (out[i] != kUntouched) return mismatch("combine wrote past the valid tokens");
  }
  digest = rows_digest(out, ob, c_.rank * g_.max_tokens, mine.tokens);
  return ok_status();
}

}  // namespace fabric_lib::moe::testing
