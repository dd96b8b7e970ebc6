// Shared pieces of the KV integration tests: building requests with permuted, non-contiguous
// page lists, and driving prefill agents.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>

#include "support/kv_agent.h"

namespace fabric_lib::kv::testing {

inline constexpr std::chrono::milliseconds kRequestTimeout{20000};
inline constexpr std::chrono::milliseconds kWait{20000};

// `count` distinct pages out of [0, num_pages), shuffled (so neither contiguous nor ordered).
inline std::vector<uint32_t> permuted_pages(uint32_t count, uint32_t num_pages, uint64_t seed) {
  std::vector<uint32_t> all(num_pages);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(count);
  return all;
}

// A request of `tokens` tokens: destination and source pages drawn from disjoint-by-seed permutations.
inline DecodeHost::Started make_request(const std::string& id, uint32_t tokens, const HostConfig& c, uint64_t seed,
                                        uint64_t tail_offset, uint64_t tail_length, uint32_t first_page = 0,
                                        std::vector<uint32_t>* dst_pool = nullptr) {
  DecodeHost::Started s;
  s.id = id;
  s.tokens = tokens;
  s.first_page = first_page;
  const uint32_t n = pages_for_tokens(tokens, c.layout.page_tokens);
  s.src_pages = permuted_pages(n, c.num_pages, seed * 7919 + 1);
  if (dst_pool) {
    s.pages.assign(dst_pool->end() - (n - first_page), dst_pool->end());
    dst_pool->resize(dst_pool->size() - (n - first_page));
  } else {
    s.pages = permuted_pages(n - first_page, c.num_pages, seed * 104729 + 3);
  }
  s.tail_offset = tail_offset;
  s.tail_length = tail_length;
  return s;
}

inline PrefillInstance instance_of(const std::vector<std::unique_ptr<KvAgent>>& ranks, KvPacking packing = KvPacking::kSeparate) {
  PrefillInstance p;
  p.tp_size = static_cast<uint32_t>(ranks.size());
  p.packing = packing;
  for (const auto& a : ranks) p.ranks.push_back(a->address());
  return p;
}

inline std::string add_command(const DecodeHost::Started& s, uint64_t timeout_ms = 20000) {
  return "add " + s.id + " " + std::to_string(s.tokens) + " " + join(s.src_pages) + " " + std::to_string(s.tail_offset) + " " +
         std::to_string(s.tail_length) + " " + std::to_string(timeout_ms);
}

// "<n> id=code ..." -> whether it lists n requests, all ok.
inline bool all_ok(const std::string& reply, size_t n) {
  size_t oks = 0, pos = 0;
  while ((pos = reply.find("=ok", pos)) != std::string::npos) ++oks, ++pos;
  return reply.rfind(std::to_string(n), 0) == 0 && oks == n &&
         static_cast<size_t>(std::count(reply.begin(), reply.end(), '=')) == n;
}

// A field of a "key=value ..." stats reply.
inline uint64_t stat(const std::string& reply, const std::string& key) {
  const size_t p = reply.find(key + "=");
  return p == std::string::npos ? UINT64_MAX : std::stoull(reply.substr(p + key.size() + 1));
}

}  // namespace fabric_lib::kv::testing
