// IpcDomain: post_writes — a paged write's pages on this domain as runs, each ONE op and ONE
// gather copy (its completion one event counting the run's WRs, its imms one ring record), so
// that the domain's work per page is a range check and a segment.
#include <algorithm>

#include "transport/ipc/ipc_domain.h"

namespace fabric_lib::transport::ipc {
namespace {

// WRs per run at most: a run's WRs and its imm arrivals are counted in 32 bits, and its gather
// is one copy request (and one allocation of segments the first time one this large comes).
constexpr size_t kMaxRunWrs = size_t{1} << 16;

bool same_run(const WriteWr& a, const WriteWr& b) {
  return a.peer == b.peer && a.src_desc == b.src_desc && a.rkey == b.rkey && a.length == b.length &&
         a.context == b.context && a.has_imm == b.has_imm && (!a.has_imm || a.imm == b.imm);
}

}  // namespace

size_t IpcDomain::run_length(std::span<const WriteWr> wrs) {
  if (wrs.empty() || wrs.front().length == 0 || wrs.front().src_desc == nullptr) return 1;
  const size_t limit = std::min(wrs.size(), kMaxRunWrs);
  size_t n = 1;
  while (n < limit && same_run(wrs.front(), wrs[n])) ++n;
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

size_t IpcDomain::post_run(std::span<const WriteWr> run, PostResult* last, Status* error) {
  const WriteWr& first = run.front();
  Peer* peer = find_peer(first.peer);
  const auto* src = static_cast<const LocalRegion*>(first.src_desc);
  // An unknown, removed or dead peer: post_write's refusals, or its PeerUnreachable events.
  if (!peer || peer->removed || peer->dead) return post_each(run, last, error);
  if (ops_.in_use() >= options_.max_inflight) {
    *last = PostResult::kAgain;
    return 0;
  }
  Result<RemoteRegion*> dst = resolve_region(*peer, first.rkey, *src);
  if (!dst.ok()) {
    *last = PostResult::kFailed;
    if (error) *error = dst.status();
    return 0;
  }
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

}  // namespace fabric_lib::transport::ipc
