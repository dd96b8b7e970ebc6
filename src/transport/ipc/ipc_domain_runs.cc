// IpcDomain: post_writes — a paged write's pages on this domain as runs, each ONE op and ONE
// gather copy of page pairs (CopyRequest::pages; its completion one event counting the run's
// WRs, its imms one ring record), so that the domain's work per page is a range check and a
// pair; the shards of one write (contiguous on both sides) as ONE op and ONE plain copy the
// same way.
#include <algorithm>
#include <type_traits>

#include "transport/ipc/ipc_domain.h"

namespace fabric_lib::transport::ipc {
namespace {

// WRs per run at most: a run's WRs and its imm arrivals are counted in 32 bits, and its gather
// is one copy request (and one allocation of segments the first time one this large comes).
constexpr size_t kMaxRunWrs = size_t{1} << 16;

// One peer, source region, key, context and imm: what every WR of a run shares.
bool same_op(const WriteWr& a, const WriteWr& b) {
  return a.peer == b.peer && a.src_desc == b.src_desc && a.rkey == b.rkey && a.context == b.context &&
         a.has_imm == b.has_imm && (!a.has_imm || a.imm == b.imm);
}

}  // namespace

bool IpcDomain::continues(const WriteWr& a, const WriteWr& b) {
  return b.length > 0 && b.src == static_cast<const uint8_t*>(a.src) + a.length && b.remote_addr == a.remote_addr + a.length;
}

size_t IpcDomain::run_length(std::span<const WriteWr> wrs) {
  if (wrs.empty() || wrs.front().length == 0 || wrs.front().src_desc == nullptr) return 1;
  const size_t limit = std::min(wrs.size(), kMaxRunWrs);
  size_t n = 1;
  if (limit > 1 && same_op(wrs[0], wrs[1]) && continues(wrs[0], wrs[1])) {
    // The shards of one write on this domain: contiguous on both sides, of any lengths.
    while (n < limit && same_op(wrs.front(), wrs[n]) && continues(wrs[n - 1], wrs[n])) ++n;
    return n;
  }
  // A paged write's pages: one length, anywhere.
  while (n < limit && same_op(wrs.front(), wrs[n]) && wrs[n].length == wrs.front().length) ++n;
  return n;
}

size_t IpcDomain::post_writes(std::span<const WriteWr> wrs, PostResult* last, Status* error) {
  *last = PostResult::kPosted;
  size_t n = 0;
  while (n < wrs.size() && *last == PostResult::kPosted) {
    const size_t len = run_length(wrs.subspan(n));
    n += len > 1 ? post_run(wrs.subspan(n, len), last, error) : post_each(wrs.subspan(n, 1), last, error);
  }
  return n;
}

size_t IpcDomain::post_each(std::span<const WriteWr> wrs, PostResult* last, Status* error) {
  size_t n = 0;
  for (const WriteWr& wr : wrs) {
    *last = post_write(wr, error);
    if (*last != PostResult::kPosted) break;
    ++n;
  }
  return n;
}

IpcDomain::RunTarget IpcDomain::run_target(PeerHandle handle, const void* src_desc, uint64_t rkey, PostResult* last,
                                           Status* error) {
  RunTarget t;
  t.peer = find_peer(handle);
  t.src = static_cast<const LocalRegion*>(src_desc);
  // An unknown, removed or dead peer: post_write's refusals, or its PeerUnreachable events.
  if (!t.peer || t.peer->removed || t.peer->dead || !t.src) {
    t.one_by_one = true;
    return t;
  }
  if (ops_.in_use() >= options_.max_inflight) {
    *last = PostResult::kAgain;
    return t;
  }
  Result<RemoteRegion*> dst = resolve_region(*t.peer, rkey, *t.src);
  if (!dst.ok()) {
    *last = PostResult::kFailed;
    if (error) *error = dst.status();
    return t;
  }
  t.dst = *dst;
  return t;
}

size_t IpcDomain::post_run(std::span<const WriteWr> run, PostResult* last, Status* error) {
  const WriteWr& first = run.front();
  const RunTarget t = run_target(first.peer, first.src_desc, first.rkey, last, error);
  if (t.one_by_one) return post_each(run, last, error);
  if (!t.dst) return 0;
  Peer* peer = t.peer;
  const LocalRegion* src = t.src;
  RemoteRegion* const* dst = &t.dst;
  // Every WR checked as post_write checks it; the run ends before the first refused one.
  size_t good = 0;
  Status refused;
  while (good < run.size()) {
    refused = check_ranges(run[good], *src, (*dst)->info);
    if (!refused.ok()) break;
    ++good;
  }
  if (good > 0) {
    *last = start_copy(*peer, run.first(good), *src, **dst, error);
    if (*last != PostResult::kPosted) return 0;  // kAgain (or a refusal): none of it is posted
  }
  if (good < run.size()) {
    *last = PostResult::kFailed;
    if (error) *error = std::move(refused);
  }
  return good;
}

size_t IpcDomain::post_pages_as_writes(const PageRunWr& run, PostResult* last, Status* error) {
  return Domain::post_pages(run, last, error);
}

size_t IpcDomain::post_pages(const PageRunWr& run, PostResult* last, Status* error) {
  *last = PostResult::kPosted;
  if (run.count == 0) return 0;
  // Imm-only pages, runs of one, unusual peers: WR by WR, for post_write's refusals and events.
  if (run.page_length == 0 || run.count == 1) return post_pages_as_writes(run, last, error);
  const RunTarget t = run_target(run.peer, run.src_desc, run.rkey, last, error);
  if (t.one_by_one) return post_pages_as_writes(run, last, error);
  if (!t.dst) return 0;
  Peer* peer = t.peer;
  const LocalRegion* src = t.src;
  RemoteRegion* const* dst = &t.dst;
  // Each page a segment, checked as post_write checks its WR (in 128 bits: no index or stride
  // can wrap); the run ends before the first page that fails.
  const size_t count = std::min(run.count, kMaxRunWrs);
  const unsigned __int128 src_base = static_cast<uint64_t>(run.src - src->base);  // run.src >= src->base checked below
  const unsigned __int128 src_limit = src->length;
  const unsigned __int128 dst_limit = (*dst)->info.length;
  const bool src_inside = run.src >= src->base;
  // The page pairs go where the copy engine reads them when it offers room (pinned memory the
  // page-copy kernel reads), so they are written once: 8 bytes a page, its two indices as they
  // are (the kernel scales them by the strides), not two 64-bit offsets computed here.
  const std::span<gpu::CopyPagePair> pairs = page_space(count, **dst);
  size_t good = 0;
  // The common case, every page in range: one pass fills the pairs (and finds the largest
  // indices unless the caller knows them: run.largest_known), then one check of those (in 128
  // bits). (Finding the maxima in the same loop made it ~1.7x slower at -O3: the engine already
  // has them.)
  uint32_t max_src = run.largest_src_page, max_dst = run.largest_dst_page;
  if (run.largest_known) {
    for (size_t i = 0; i < count; ++i) pairs[i] = {run.src_pages[i], run.dst_pages[i]};
  } else {
    max_src = max_dst = 0;
    for (size_t i = 0; i < count; ++i) {
      const uint32_t sp = run.src_pages[i], dp = run.dst_pages[i];
      max_src = std::max(max_src, sp);
      max_dst = std::max(max_dst, dp);
      pairs[i] = {sp, dp};
    }
  }
  if (src_inside && src_base + static_cast<unsigned __int128>(max_src) * run.src_stride + run.page_length <= src_limit &&
      run.remote_addr + static_cast<unsigned __int128>(max_dst) * run.dst_stride + run.page_length <= dst_limit) {
    good = count;
  } else {
    // Some page is out of range (or wraps): page by page, up to the first one that is.
    for (; good < count; ++good) {
      const unsigned __int128 s = src_base + static_cast<unsigned __int128>(run.src_pages[good]) * run.src_stride;
      const unsigned __int128 t = run.remote_addr + static_cast<unsigned __int128>(run.dst_pages[good]) * run.dst_stride;
      if (!src_inside || s + run.page_length > src_limit || t + run.page_length > dst_limit) break;
    }
  }
  if (good > 0) {
    const CopyShape shape{static_cast<uint32_t>(good), run.context, run.has_imm, run.imm, run.page_length,
                          static_cast<uint32_t>(good)};
    if (good == 1) {
      const WriteWr wr = run.write(0);
      *last = submit_copy(*peer, shape, static_cast<const uint8_t*>(wr.src), wr.remote_addr, {}, *src, **dst, error);
    } else {
      const Gather gather{{}, pairs.first(good), run.src_stride, run.dst_stride};
      *last = submit_copy(*peer, shape, run.src, run.remote_addr, gather, *src, **dst, error);
    }
    if (*last != PostResult::kPosted) return 0;  // kAgain (or a refusal): none of it is posted
  }
  if (good < count) {  // the page that failed, with post_write's own words
    *last = PostResult::kFailed;
    Status why = check_ranges(run.write(good), *src, (*dst)->info);
    // An index times its stride past 2^64 wraps in a WriteWr's 64 bits (and may look in range).
    if (why.ok()) why = out_of_range("ipc: page " + std::to_string(good) + " of the run lies past 2^64 bytes");
    if (error) *error = std::move(why);
    return good;
  }
  if (count < run.count) {  // longer than one op may be: the rest as the next run
    PageRunWr rest = run;
    rest.src_pages += count;
    rest.dst_pages += count;
    rest.count -= count;
    return count + post_pages(rest, last, error);
  }
  return good;
}

}  // namespace fabric_lib::transport::ipc
