// MoeConfig validation, the derived Geometry and the BufferPlan (the memory formula).
#include "fabric_lib/moe/config.h"

#include <algorithm>
#include <cstdio>

#include "fabric_lib/moe/layout.h"

namespace fabric_lib::moe {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFp8E4M3: return 1;
    case DType::kBf16: return 2;
    case DType::kFp16: return 2;
    case DType::kFp32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFp8E4M3: return "fp8_e4m3";
    case DType::kBf16: return "bf16";
    case DType::kFp16: return "fp16";
    case DType::kFp32: return "fp32";
  }
  return "?";
}

namespace {

Status bad(const std::string& field, const std::string& why) { return invalid_argument("MoeConfig." + field + ": " + why); }

uint32_t default_private_tokens(const MoeConfig& c) {
  const uint64_t avg_per_expert = (uint64_t{c.max_num_tokens} * c.experts_per_token + c.num_experts - 1) / c.num_experts;
  const uint64_t p = avg_per_expert * 12 / 10 * (c.num_experts / c.world_size);
  return static_cast<uint32_t>(std::min<uint64_t>(p, uint64_t{c.max_num_tokens} * c.experts_per_token));
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

}  // namespace

Status MoeConfig::validate() const {
  if (world_size == 0 || world_size > kMaxWorldSize) return bad("world_size", "must be 1.." + std::to_string(kMaxWorldSize));
  if (rank >= world_size) return bad("rank", std::to_string(rank) + " is not below world_size " + std::to_string(world_size));
  if (max_num_tokens == 0 || max_num_tokens > (1u << 20)) return bad("max_num_tokens", "must be 1..2^20");
  if (num_experts == 0 || num_experts > (1u << 16)) return bad("num_experts", "must be 1..65536");
  if (num_experts % world_size != 0) {
    return bad("num_experts", std::to_string(num_experts) + " is not divisible by world_size " + std::to_string(world_size));
  }
  if (experts_per_token == 0 || experts_per_token > 64 || experts_per_token > num_experts) {
    return bad("experts_per_token", "must be 1..min(64, num_experts)");
  }
  if (hidden_dim == 0 || hidden_dim > (1u << 20)) return bad("hidden_dim", "must be 1..2^20");
  if (hidden_dim_scale > hidden_dim) return bad("hidden_dim_scale", "must be <= hidden_dim");
  if (dtype_size(in_dtype) == 0) return bad("in_dtype", "unknown");
  if (out_dtype != DType::kBf16 && out_dtype != DType::kFp32) return bad("out_dtype", "must be bf16 or fp32");
  if (expert_padding == 0 || expert_padding > 4096) return bad("expert_padding", "must be 1..4096");
  if (step_timeout.count() <= 0) return bad("step_timeout", "must be positive");
  if (imm_base > UINT32_MAX - 2) return bad("imm_base", "needs three values");
  if (path != Path::kProxy && path != Path::kDirect) return bad("path", "unknown");
  if (path == Path::kDirect && overflow_tokens != kAuto && overflow_tokens != 0) {
    return bad("overflow_tokens", "kDirect has no overflow region (pairs past P are pulled from the sender)");
  }
  // Every row index must fit 32 bits: W * (P + M * K) rows at most.
  const uint64_t pairs = uint64_t{max_num_tokens} * experts_per_token;
  const uint64_t p = max_private_tokens == kAuto ? default_private_tokens(*this) : max_private_tokens;
  if (p > pairs) return bad("max_private_tokens", "must be <= max_num_tokens * experts_per_token");
  const uint64_t c = overflow_tokens == kAuto ? 0 : overflow_tokens;
  if (uint64_t{world_size} * (p + pairs) + c > (1ull << 31)) return bad("world_size", "too many receive rows for 32-bit indices");
  const uint64_t record = round_up(uint64_t{hidden_dim} * 4, 16) + round_up(uint64_t{hidden_dim_scale} * 4, 16);
  if (record * pairs > (1ull << 30)) return bad("max_num_tokens", "one peer's share exceeds one 1 GiB work request");
  return ok_status();
}

uint64_t MoeConfig::fingerprint() const {
  uint64_t h = 0x4D6F4543666731ull;  // bumps with the protocol
  for (uint64_t v : {uint64_t{max_num_tokens}, uint64_t{num_experts}, uint64_t{experts_per_token}, uint64_t{hidden_dim},
                     uint64_t{hidden_dim_scale}, uint64_t(in_dtype), uint64_t(out_dtype), uint64_t{expert_padding},
                     uint64_t{world_size}, uint64_t{max_private_tokens}, uint64_t{overflow_tokens}, uint64_t(path),
                     uint64_t{imm_base}}) {
    h = mix(h, v);
  }
  return h;
}

std::string MoeConfig::to_string() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "M=%u E=%u K=%u H=%u S=%u in=%s out=%s pad=%u W=%u rank=%u P=%s C=%s path=%s", max_num_tokens,
                num_experts, experts_per_token, hidden_dim, hidden_dim_scale, dtype_name(in_dtype),
                dtype_name(out_dtype), expert_padding, world_size, rank,
                max_private_tokens == kAuto ? "auto" : std::to_string(max_private_tokens).c_str(),
                overflow_tokens == kAuto ? "auto" : std::to_string(overflow_tokens).c_str(),
                path == Path::kProxy ? "proxy" : "direct");
  return buf;
}

Geometry Geometry::from(const MoeConfig& c) {
  Geometry g;
  g.world = c.world_size;
  g.rank = c.rank;
  g.experts = c.num_experts;
  g.local_experts = c.num_experts / c.world_size;
  g.top_k = c.experts_per_token;
  g.max_tokens = c.max_num_tokens;
  g.padding = c.expert_padding;
  g.hidden = c.hidden_dim;
  g.hidden_scale = c.hidden_dim_scale;
  g.in_size = dtype_size(c.in_dtype);
  g.out_size = dtype_size(c.out_dtype);
  g.x_bytes = size_t{c.hidden_dim} * g.in_size;
  g.x_stride = round_up(g.x_bytes, 16);
  g.scale_bytes = size_t{c.hidden_dim_scale} * 4;
  g.dispatch_record = g.x_stride + round_up(g.scale_bytes, 16);
  g.combine_record = round_up(size_t{c.hidden_dim} * g.out_size, 16);
  g.route_block = route_block_bytes(c.num_experts);
  g.max_pairs = c.max_num_tokens * c.experts_per_token;
  g.max_pairs_per_rank = c.max_num_tokens * std::min(c.experts_per_token, g.local_experts);
  g.private_tokens = c.max_private_tokens == kAuto ? default_private_tokens(c) : c.max_private_tokens;
  g.path = c.path;
  const uint64_t remote_peers = c.world_size - 1;
  const uint64_t worst_overflow =
      remote_peers * (g.max_pairs_per_rank > g.private_tokens ? g.max_pairs_per_rank - g.private_tokens : 0);
  if (c.path == Path::kDirect) {
    g.overflow_tokens = 0;
  } else {
    g.overflow_tokens = static_cast<uint32_t>(c.overflow_tokens == kAuto ? worst_overflow : c.overflow_tokens);
  }
  g.recv_slots = c.world_size * g.private_tokens + g.overflow_tokens;
  g.combine_stage_rows = c.path == Path::kDirect ? 0 : static_cast<uint32_t>(remote_peers * g.private_tokens + g.overflow_tokens);
  // Pairs a rank can receive: its own, plus what its private slots and overflow rows hold (or,
  // pulling, everything the others can send).
  const uint64_t own = g.max_pairs_per_rank;
  const uint64_t remote_cap = c.path == Path::kDirect
                                  ? remote_peers * g.max_pairs_per_rank
                                  : std::min<uint64_t>(remote_peers * g.max_pairs_per_rank,
                                                       remote_peers * std::min(g.private_tokens, g.max_pairs_per_rank) +
                                                           g.overflow_tokens);
  g.max_recv_tokens =
      static_cast<uint32_t>(round_up(own + remote_cap + uint64_t{g.local_experts} * (g.padding - 1), g.padding));
  return g;
}

BufferPlan BufferPlan::from(const Geometry& g) {
  BufferPlan b;
  b.route_send = 2 * g.route_block;
  b.route_recv = 2 * size_t{g.world} * g.route_block;
  b.dispatch_send = size_t{g.max_pairs} * g.dispatch_record;
  b.dispatch_recv = size_t{g.recv_slots} * g.dispatch_record;
  b.combine_send = size_t{g.combine_stage_rows} * g.combine_record;
  b.combine_recv = size_t{g.max_pairs} * g.combine_record;
  b.control = control_region_bytes(RecvPlanLayout{g.world, g.local_experts});
  b.workspace = size_t{g.max_pairs} * 4 + 64;
  return b;
}

size_t BufferPlan::total() const {
  return route_send + route_recv + dispatch_send + dispatch_recv + combine_send + combine_recv + control + workspace;
}

std::string BufferPlan::describe(const Geometry& g) const {
  auto mib = [](size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  char buf[2048];
  std::snprintf(
      buf, sizeof buf,
      "W=%u L=%u M=%u K=%u P=%u C=%u Td=%zu Tc=%zu\n"
      "  dispatch_send  M*K*Td              = %10zu B (%8.2f MiB)\n"
      "  dispatch_recv  (W*P + C)*Td        = %10zu B (%8.2f MiB)\n"
      "  combine_send   ((W-1)*P + C)*Tc    = %10zu B (%8.2f MiB)\n"
      "  combine_recv   M*K*Tc              = %10zu B (%8.2f MiB)\n"
      "  routes         (2 + 2*W)*(32+4E)   = %10zu B\n"
      "  control+plans+workspace            = %10zu B\n"
      "  total per rank                     = %10zu B (%8.2f MiB); expert-contiguous output rows: %u\n",
      g.world, g.local_experts, g.max_tokens, g.top_k, g.private_tokens, g.overflow_tokens, g.dispatch_record,
      g.combine_record, dispatch_send, mib(dispatch_send), dispatch_recv, mib(dispatch_recv), combine_send,
      mib(combine_send), combine_recv, mib(combine_recv), route_send + route_recv, control + workspace, total(),
      mib(total()), g.max_recv_tokens);
  return buf;
}

}  // namespace fabric_lib::moe
