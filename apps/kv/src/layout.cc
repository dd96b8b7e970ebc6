#include "fabric_lib/kv/layout.h"

#include <array>

namespace fabric_lib::kv {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kU8: case DType::kFp8E4M3: case DType::kFp8E5M2: return 1;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF32: return 4;
    case DType::kF64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kU8: return "u8";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kFp8E4M3: return "fp8_e4m3";
    case DType::kFp8E5M2: return "fp8_e5m2";
  }
  return "unknown";
}

namespace {
std::string_view kind_name(AttentionKind k) {
  return k == AttentionKind::kGqa ? "gqa" : k == AttentionKind::kMla ? "mla" : "unknown";
}
}  // namespace

Status KvLayout::validate() const {
  if (kind != AttentionKind::kGqa && kind != AttentionKind::kMla) return invalid_argument("kv layout: unknown attention kind");
  if (dtype_size(dtype) == 0) return invalid_argument("kv layout: unknown dtype");
  if (num_layers < 1 || num_layers > 4096) return invalid_argument("kv layout: num_layers must be 1..4096");
  if (page_tokens < 1 || page_tokens > 65536) return invalid_argument("kv layout: page_tokens must be 1..65536");
  if (head_dim < 1 || head_dim > 65536) return invalid_argument("kv layout: head_dim must be 1..65536");
  if (kv_heads < 1 || kv_heads > 4096) return invalid_argument("kv layout: kv_heads must be 1..4096");
  if (kind == AttentionKind::kMla && kv_heads != 1) return invalid_argument("kv layout: MLA has exactly one latent 'head'");
  if (head_page_bytes() > (1ull << 30)) return invalid_argument("kv layout: one head of one page exceeds 1 GiB");
  return ok_status();
}

uint64_t KvLayout::head_page_bytes() const { return uint64_t(page_tokens) * head_dim * dtype_size(dtype); }

uint64_t KvLayout::fingerprint() const {
  // FNV-1a over a canonical little-endian encoding, prefixed with a format tag.
  std::array<uint8_t, 4 + 2 + 16> b{'K', 'V', 'L', '1', static_cast<uint8_t>(kind), static_cast<uint8_t>(dtype)};
  const uint32_t fields[4] = {num_layers, page_tokens, head_dim, kv_heads};
  for (int f = 0; f < 4; ++f)
    for (int i = 0; i < 4; ++i) b[6 + f * 4 + i] = static_cast<uint8_t>(fields[f] >> (8 * i));
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string KvLayout::describe_mismatch(const KvLayout& o) const {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  if (kind != o.kind) add("kind " + std::string(kind_name(kind)) + " != " + std::string(kind_name(o.kind)));
  if (dtype != o.dtype) add("dtype " + std::string(dtype_name(dtype)) + " != " + std::string(dtype_name(o.dtype)));
  if (num_layers != o.num_layers) add("num_layers " + std::to_string(num_layers) + " != " + std::to_string(o.num_layers));
  if (page_tokens != o.page_tokens) add("page_tokens " + std::to_string(page_tokens) + " != " + std::to_string(o.page_tokens));
  if (head_dim != o.head_dim) add("head_dim " + std::to_string(head_dim) + " != " + std::to_string(o.head_dim));
  if (kv_heads != o.kv_heads) add("kv_heads " + std::to_string(kv_heads) + " != " + std::to_string(o.kv_heads));
  return out;
}

std::string KvLayout::to_string() const {
  return std::string(kind_name(kind)) + " " + std::string(dtype_name(dtype)) + " layers=" + std::to_string(num_layers) +
         " page_tokens=" + std::to_string(page_tokens) + " head_dim=" + std::to_string(head_dim) +
         " kv_heads=" + std::to_string(kv_heads);
}

Status validate_tp(const KvLayout& layout, uint32_t tp_size) {
  if (tp_size < 1 || tp_size > 4096) return invalid_argument("tp size must be 1..4096");
  if (layout.kind == AttentionKind::kMla) return ok_status();
  const uint32_t h = layout.kv_heads;
  if (h % tp_size != 0 && tp_size % h != 0) {
    return invalid_argument("tp size " + std::to_string(tp_size) + " neither divides nor is a multiple of " +
                            std::to_string(h) + " kv heads");
  }
  return ok_status();
}

uint32_t heads_per_rank(const KvLayout& layout, uint32_t tp_size) {
  if (layout.kind == AttentionKind::kMla || tp_size == 0) return 1;
  return tp_size <= layout.kv_heads ? layout.kv_heads / tp_size : 1;
}

uint32_t first_head_of_rank(const KvLayout& layout, uint32_t tp_rank, uint32_t tp_size) {
  if (layout.kind == AttentionKind::kMla || tp_size == 0) return 0;
  if (tp_size <= layout.kv_heads) return tp_rank * (layout.kv_heads / tp_size);
  return tp_rank / (tp_size / layout.kv_heads);
}

bool rank_holds_head(const KvLayout& layout, uint32_t tp_rank, uint32_t tp_size, uint32_t head) {
  const uint32_t first = first_head_of_rank(layout, tp_rank, tp_size);
  return head >= first && head < first + heads_per_rank(layout, tp_size);
}

uint64_t KvMemoryLayout::page_bytes(const KvLayout& layout, uint32_t tp_size, KvPacking packing) {
  const uint64_t one = uint64_t(heads_per_rank(layout, tp_size)) * layout.head_page_bytes();
  return packing == KvPacking::kStacked ? 2 * one : one;
}

Status KvMemoryLayout::validate(const KvLayout& layout, uint32_t tp_size, const std::vector<uint64_t>& lengths) const {
  if (packing != KvPacking::kSeparate && packing != KvPacking::kStacked) return invalid_argument("kv memory: unknown packing");
  if (layout.kind == AttentionKind::kMla && packing != KvPacking::kSeparate)
    return invalid_argument("kv memory: MLA pages have one buffer (use kSeparate)");
  const uint64_t pb = page_bytes(layout, tp_size, packing);
  if (num_pages == 0) return invalid_argument("kv memory: no pages");
  if (page_stride < pb) return invalid_argument("kv memory: page_stride " + std::to_string(page_stride) +
                                                " < page bytes " + std::to_string(pb));
  const bool two = layout.kind == AttentionKind::kGqa && packing == KvPacking::kSeparate;
  if (k.size() != layout.num_layers) return invalid_argument("kv memory: need one K buffer per layer");
  if (v.size() != (two ? layout.num_layers : 0)) return invalid_argument(two ? "kv memory: need one V buffer per layer"
                                                                           : "kv memory: V buffers given for a one-buffer layout");
  if (lengths.empty()) return ok_status();
  // Last byte of a buffer: offset + (num_pages - 1) * stride + page_bytes; checked without overflow.
  const unsigned __int128 span = static_cast<unsigned __int128>(num_pages - 1) * page_stride + pb;
  for (const auto* list : {&k, &v}) {
    for (const KvBufferRef& b : *list) {
      if (b.region >= lengths.size()) return invalid_argument("kv memory: buffer names region " + std::to_string(b.region));
      if (static_cast<unsigned __int128>(b.offset) + span > lengths[b.region])
        return out_of_range("kv memory: a buffer's pages end past its region");
    }
  }
  return ok_status();
}

KvMemoryLayout KvMemoryLayout::contiguous(const KvLayout& layout, uint32_t tp_size, KvPacking packing, uint32_t num_pages,
                                          uint64_t base, uint16_t region, uint64_t* total_bytes) {
  KvMemoryLayout m;
  m.packing = packing;
  m.num_pages = num_pages;
  m.page_stride = page_bytes(layout, tp_size, packing);
  const uint64_t buffer_bytes = m.page_stride * num_pages;
  const bool two = layout.kind == AttentionKind::kGqa && packing == KvPacking::kSeparate;
  const uint64_t layer_bytes = buffer_bytes * (two ? 2 : 1);
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    m.k.push_back({region, base + l * layer_bytes});
    if (two) m.v.push_back({region, base + l * layer_bytes + buffer_bytes});
  }
  if (total_bytes) *total_bytes = layer_bytes * layout.num_layers;
  return m;
}

}  // namespace fabric_lib::kv
