// Per-operation context storage for libfabric: every posted WR needs an fi_context2 that stays
// valid until its completion is read. Pooled, so posting allocates nothing in steady state.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/domain.h"

namespace fabric_lib::transport::libfabric {

struct OpContext {
  fi_context2 fi_ctx;  // must stay first: libfabric hands back this address as op_context
  uint64_t user_context = 0;
  EventKind kind = EventKind::kWriteDone;
  bool in_use = false;  // guards against a provider reporting one operation twice
};

class OpContextPool {
 public:
  OpContext* acquire(EventKind kind, uint64_t user_context) {
    if (free_.empty()) grow();
    OpContext* ctx = free_.back();
    free_.pop_back();
    ctx->kind = kind;
    ctx->user_context = user_context;
    ctx->in_use = true;
    ++in_use_;
    return ctx;
  }
  // False when `ctx` was not in use: a duplicate completion, which the caller must ignore.
  bool release(OpContext* ctx) {
    if (!ctx->in_use) return false;
    ctx->in_use = false;
    free_.push_back(ctx);
    --in_use_;
    return true;
  }
  size_t in_use() const { return in_use_; }

 private:
  static constexpr size_t kBlock = 256;
  void grow() {
    blocks_.push_back(std::make_unique<OpContext[]>(kBlock));
    for (size_t i = 0; i < kBlock; ++i) free_.push_back(&blocks_.back()[i]);
  }
  std::vector<std::unique_ptr<OpContext[]>> blocks_;
  std::vector<OpContext*> free_;
  size_t in_use_ = 0;
};

}  // namespace fabric_lib::transport::libfabric
