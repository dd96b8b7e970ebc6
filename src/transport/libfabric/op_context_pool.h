// Per-operation context storage for libfabric: every posted WR needs an fi_context2 that stays
// valid until its completion is read. Pooled (base/slab_pool.h), so posting allocates nothing in
// steady state.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>

#include "base/slab_pool.h"
#include "transport/domain.h"

namespace fabric_lib::transport::libfabric {

struct OpContext {
  fi_context2 fi_ctx;  // must stay first: libfabric hands back this address as op_context
  uint64_t user_context = 0;
  EventKind kind = EventKind::kWriteDone;
};

class OpContextPool {
 public:
  OpContext* acquire(EventKind kind, uint64_t user_context) {
    OpContext* ctx = pool_.acquire();
    ctx->kind = kind;
    ctx->user_context = user_context;
    return ctx;
  }
  // False when `ctx` was not in use: a duplicate completion, which the caller must ignore.
  bool release(OpContext* ctx) { return pool_.release(ctx); }
  size_t in_use() const { return pool_.in_use(); }

 private:
  SlabPool<OpContext> pool_;
};

}  // namespace fabric_lib::transport::libfabric
