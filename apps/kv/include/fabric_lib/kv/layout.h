// KV-cache layouts: what a model's paged KV cache looks like (KvLayout, shared by both sides and
// fingerprinted), how tensor parallelism splits its heads over ranks, and where one rank keeps
// its pages in memory (KvMemoryLayout).
//
// GQA pages are HND per layer: [pages, kv_heads_of_rank, page_tokens, head_dim], K and V in two
// buffers (kSeparate) or stacked in one ([pages, 2, kv_heads_of_rank, page_tokens, head_dim],
// kStacked: FlashInfer's HND). One KV head of one page is contiguous, so a head slice of a page is
// one write. MLA pages are [pages, page_tokens, latent_dim], the same on every TP rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::kv {

enum class DType : uint8_t { kU8 = 1, kF16 = 2, kBF16 = 3, kF32 = 4, kF64 = 5, kFp8E4M3 = 6, kFp8E5M2 = 7 };
// Bytes per element; 0 for a value outside the enum.
size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);

enum class AttentionKind : uint8_t {
  kGqa = 1,  // per-head K and V (MHA, GQA, MQA): heads split (or replicated) over TP ranks
  kMla = 2,  // one latent vector per token, replicated on every TP rank
};

// Model-level properties both sides must agree on. Limits: 1..4096 layers, 1..65536 page tokens,
// 1..65536 head (latent) dim, 1..4096 KV heads (exactly 1 for MLA), one head-page <= 1 GiB.
struct KvLayout {
  AttentionKind kind = AttentionKind::kGqa;
  DType dtype = DType::kBF16;
  uint32_t num_layers = 0;
  uint32_t page_tokens = 0;
  uint32_t head_dim = 0;  // MLA: the latent dim (kv_lora_rank + rope dim)
  uint32_t kv_heads = 0;  // total KV heads of the model (before TP); MLA: 1

  Status validate() const;
  // Bytes of one head of one page (K or V): page_tokens * head_dim * dtype size.
  uint64_t head_page_bytes() const;
  // A 64-bit hash of the fields above (a canonical encoding), carried by every dispatch.
  uint64_t fingerprint() const;
  // "", or which fields differ from `other` ("page_tokens 16 != 32, dtype bf16 != f16").
  std::string describe_mismatch(const KvLayout& other) const;
  std::string to_string() const;

  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

// --- tensor parallelism -------------------------------------------------------------------------
// A TP degree t works with H KV heads when H % t == 0 (each rank holds H / t heads) or t % H == 0
// (each head is replicated on t / H consecutive ranks; each rank holds one). MLA works with any t.
Status validate_tp(const KvLayout& layout, uint32_t tp_size);
// KV heads held by one rank (1 for MLA).
uint32_t heads_per_rank(const KvLayout& layout, uint32_t tp_size);
// The first head held by `tp_rank` (0 for MLA).
uint32_t first_head_of_rank(const KvLayout& layout, uint32_t tp_rank, uint32_t tp_size);
// Whether `tp_rank` holds `head`.
bool rank_holds_head(const KvLayout& layout, uint32_t tp_rank, uint32_t tp_size, uint32_t head);

// --- one rank's memory --------------------------------------------------------------------------
enum class KvPacking : uint8_t {
  kSeparate = 1,  // GQA: a K buffer and a V buffer per layer. MLA: its single latent buffer.
  kStacked = 2,   // GQA only: K then V inside each page of one buffer per layer
};

// Byte 0 of page 0 of one layer's buffer: an offset inside one of the rank's registered regions.
struct KvBufferRef {
  uint16_t region = 0;
  uint64_t offset = 0;
  friend bool operator==(const KvBufferRef&, const KvBufferRef&) = default;
};

// Where one rank keeps its pages. Page p of layer l's K buffer starts at
// region[k[l].region] + k[l].offset + p * page_stride (V likewise; stacked: V follows K in the page).
struct KvMemoryLayout {
  KvPacking packing = KvPacking::kSeparate;
  uint64_t page_stride = 0;  // bytes between consecutive pages of one buffer (>= page_bytes())
  uint32_t num_pages = 0;    // pages in every buffer
  std::vector<KvBufferRef> k;  // one per layer (the stacked or latent buffer for kStacked / MLA)
  std::vector<KvBufferRef> v;  // one per layer for GQA kSeparate, else empty

  // Bytes of one page of one buffer on a rank of `tp_size`.
  static uint64_t page_bytes(const KvLayout& layout, uint32_t tp_size, KvPacking packing);
  // Checks the shape against `layout` and, when `region_lengths` is not empty, that every page of
  // every buffer lies inside its region.
  Status validate(const KvLayout& layout, uint32_t tp_size, const std::vector<uint64_t>& region_lengths = {}) const;

  // The usual arrangement: one region (index `region`), layer-major, pages packed:
  // layer l's K buffer at base + l * layer_bytes, its V buffer right after it (kSeparate GQA).
  // `total_bytes` receives the bytes the region needs from `base`.
  static KvMemoryLayout contiguous(const KvLayout& layout, uint32_t tp_size, KvPacking packing, uint32_t num_pages,
                                   uint64_t base = 0, uint16_t region = 0, uint64_t* total_bytes = nullptr);

  friend bool operator==(const KvMemoryLayout&, const KvMemoryLayout&) = default;
};

// Pages needed for `tokens` tokens.
inline uint32_t pages_for_tokens(uint64_t tokens, uint32_t page_tokens) {
  return page_tokens == 0 ? 0 : static_cast<uint32_t>((tokens + page_tokens - 1) / page_tokens);
}

}  // namespace fabric_lib::kv
