// Shared by the ipc domain's run tests (ipc_domain_runs_test.cc, ipc_domain_page_list_test.cc):
// 4 KiB pages with a pattern per page, shuffled targets, runs as WriteWrs or as page lists, and
// host regions registered on a Pair of domains.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "ipc_test_support.h"

namespace fabric_lib::transport::ipc::testing {

inline constexpr uint64_t kPage = 4096;

inline uint8_t pattern(size_t page, size_t i) { return static_cast<uint8_t>(page * 131 + i * 7 + 1); }

inline std::vector<size_t> shuffled(size_t n, uint32_t seed) {
  std::vector<size_t> perm(n);
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  return perm;
}

// Source page i (pattern(i, .)) goes to target page perm[i].
inline std::vector<uint8_t> source_pages(size_t pages) {
  std::vector<uint8_t> src(pages * kPage);
  for (size_t p = 0; p < pages; ++p) {
    for (size_t i = 0; i < kPage; ++i) src[p * kPage + i] = pattern(p, i);
  }
  return src;
}

// How many of the first `pages` source pages are not (yet) at their target page.
inline size_t pages_missing(const uint8_t* dst, const std::vector<size_t>& perm, size_t pages) {
  size_t missing = 0;
  for (size_t p = 0; p < pages; ++p) {
    const uint8_t* at = dst + perm[p] * kPage;
    for (size_t i = 0; i < kPage; ++i) {
      if (at[i] != pattern(p, i)) {
        ++missing;
        break;
      }
    }
  }
  return missing;
}

inline std::vector<WriteWr> page_run(const uint8_t* src, void* desc, PeerHandle peer, uint64_t rkey, const std::vector<size_t>& perm,
                              uint32_t imm, uint64_t context) {
  std::vector<WriteWr> run;
  for (size_t p = 0; p < perm.size(); ++p) run.push_back(write_wr(src + p * kPage, desc, kPage, peer, perm[p] * kPage, rkey, imm, context));
  return run;
}

// The page list of a run: source page i at src + i * kPage, to target page perm[i].
struct PageList {
  std::vector<uint32_t> src, dst;
  explicit PageList(const std::vector<size_t>& perm) {
    for (size_t i = 0; i < perm.size(); ++i) {
      src.push_back(static_cast<uint32_t>(i));
      dst.push_back(static_cast<uint32_t>(perm[i]));
    }
  }
  PageRunWr run(const uint8_t* base, void* desc, PeerHandle peer, uint64_t rkey, uint32_t imm, uint64_t context) const {
    PageRunWr r;
    r.src = base;
    r.src_desc = desc;
    r.peer = peer;
    r.rkey = rkey;
    r.page_length = r.src_stride = r.dst_stride = kPage;
    r.src_pages = src.data();
    r.dst_pages = dst.data();
    r.count = src.size();
    r.has_imm = true;
    r.imm = imm;
    r.context = context;
    return r;
  }
};

// A Pair's host regions: source_pages(src_pages) registered on a, a zeroed target of dst_pages
// pages registered on b (for remote writes). Tests take its members by structured binding and
// check smr and dmr, which also fail when the pair's domains did not open.
struct HostPages {
  std::vector<uint8_t> src, dst;
  Result<DomainMr> smr, dmr;
  HostPages(Pair& p, size_t src_pages, size_t dst_pages)
      : src(source_pages(src_pages)),
        dst(dst_pages * kPage, 0),
        smr(register_on(p.a.get(), src, Access::kLocalOnly)),
        dmr(register_on(p.b.get(), dst, Access::kRemoteWrite)) {}

 private:
  static Result<DomainMr> register_on(IpcDomain* d, std::vector<uint8_t>& bytes, Access access) {
    if (!d) return internal_error("the pair's domain did not open");
    return d->register_memory(bytes.data(), bytes.size(), access, MemoryKind::kHost);
  }
};

}  // namespace fabric_lib::transport::ipc::testing
