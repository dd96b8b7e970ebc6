// Umbrella header: everything a user of fabric-lib needs. One concept per header:
//   status.h          Status, Result<T>, ErrorCode (errors are values)
//   byte_codec.h      ByteWriter / ByteReader: little-endian, bounds-checked wire encoding
//   domain_address.h  DomainAddress: one domain's network address as bytes / hex
//   memory.h          Access, MemoryKind, MrHandle, MrDesc (the remote descriptor), MrRegistration
//   requests.h        WriteRequest, PagedWriteRequest, ScatterRequest, routes, imm_count_of()
//   prepared.h        prepared paged writes and scatters: validated once, submitted many times
//   completion.h      Completion sinks (callback, counter, GPU flag) and deadlines
//   imm_counter.h     ImmCounter: imm values into completion notifications
//   peer_group.h      PeerGroup: destinations resolved once for repeated scatters
//   health.h          PeerHealth, PeerStatus, HealthEvent
//   stats.h           EngineStats
//   metrics.h         Metrics (TransferEngine::metrics()), MetricsRegistry for applications' metrics
//   idle_policy.h     IdlePolicy
//   mapped_word.h     MappedWord: a GPU-visible word of host memory
//   uvm_watcher.h     UvmWatcher: GPU progress runs CPU callbacks
//   topology.h        GPUs, NICs, NUMA nodes and their grouping (detect_topology)
//   transfer_engine.h TransferEngine
//   engine_builder.h  TransferEngineBuilder: every setting, validated by build()
#pragma once

#include "fabric_lib/byte_codec.h"
#include "fabric_lib/completion.h"
#include "fabric_lib/domain_address.h"
#include "fabric_lib/engine_builder.h"
#include "fabric_lib/health.h"
#include "fabric_lib/idle_policy.h"
#include "fabric_lib/imm_counter.h"
#include "fabric_lib/mapped_word.h"
#include "fabric_lib/memory.h"
#include "fabric_lib/metrics.h"
#include "fabric_lib/peer_group.h"
#include "fabric_lib/prepared.h"
#include "fabric_lib/requests.h"
#include "fabric_lib/stats.h"
#include "fabric_lib/status.h"
#include "fabric_lib/topology.h"
#include "fabric_lib/transfer_engine.h"
#include "fabric_lib/uvm_watcher.h"
