// A Domain decorator that lets GPU memory be the *source* of writes on providers that cannot
// register it (no FI_HMEM, or FI_HMEM without CUDA support in the libfabric build, like Debian's
// shm): each write from a GPU region is copied, chunk by chunk, into pinned host bounce buffers
// (StagingGpu's CopyEngine) and the inner domain writes from there.
//
//   - Registration: host memory and GPU memory the inner domain accepts (HMEM) pass through.
//     GPU memory it refuses becomes a staged region if it is local-only; a remote-write GPU
//     registration is refused with an error naming the alternatives (an HMEM-capable provider,
//     or the same-host IPC backend).
//   - A write from a staged region is split into chunks of Options::chunk_bytes. Chunk k+1 is
//     copied while chunk k is on the wire; a chunk is posted once its copy is done. The pool of bounce buffers is bounded: post_write
//     returns kAgain when no buffer is free (or older writes still wait for one).
//   - Exactly one completion per accepted write, merged from its chunks (the first error wins).
//   - Imm semantics (DESIGN.md section 5): the receiver counts one imm per WR the engine posts,
//     so only one imm may reach it per write. It rides on the last chunk, which is posted only
//     after every other chunk completed locally; with delivery-complete semantics
//     (DomainInfo::delivery_complete) their bytes are then at the target, so data-before-imm
//     still holds although the chunks travel unordered.
//
// Threading and progress as for any Domain: the worker's thread only. has_deferred_work() is
// true while copies run or chunks wait to be posted (no fd wakes the worker for those).
#pragma once

#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "transport/domain.h"
#include "transport/staging/staging_gpu.h"

namespace fabric_lib::transport::staging {

class StagingDomain final : public transport::Domain {
 public:
  struct Options {
    uint64_t chunk_bytes = 1 << 20;  // one bounce buffer
    size_t buffers = 16;             // bounce buffers per domain (pinned on first staged registration)
  };

  StagingDomain(std::unique_ptr<transport::Domain> inner, StagingGpuFactory gpu, Options options);
  StagingDomain(std::unique_ptr<transport::Domain> inner, StagingGpuFactory gpu)
      : StagingDomain(std::move(inner), std::move(gpu), Options{}) {}
  ~StagingDomain() override;

  const transport::DomainInfo& info() const override { return inner_->info(); }
  const std::vector<uint8_t>& address() const override { return inner_->address(); }
  Result<transport::DomainMr> register_memory(void* ptr, size_t length, Access access, MemoryKind kind) override;
  void unregister_memory(uint64_t mr_id) override;
  Result<transport::PeerHandle> add_peer(std::span<const uint8_t> address) override { return inner_->add_peer(address); }
  // Staged writes to `peer` end with PeerUnreachable (their unposted chunks are never posted: the
  // handle may be reused for another peer), then the inner domain forgets the peer.
  void remove_peer(transport::PeerHandle peer) override;

  transport::PostResult post_write(const transport::WriteWr& wr, Status* error) override;
  transport::PostResult post_send(const transport::SendWr& wr, Status* error) override { return inner_->post_send(wr, error); }
  transport::PostResult post_recv(const transport::RecvWr& wr, Status* error) override { return inner_->post_recv(wr, error); }
  bool supports_control() const override { return inner_->supports_control(); }
  transport::PostResult post_control_send(const transport::SendWr& wr, Status* error) override {
    return inner_->post_control_send(wr, error);
  }
  transport::PostResult post_control_recv(const transport::RecvWr& wr, Status* error) override {
    return inner_->post_control_recv(wr, error);
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override;

  int wait_fd() const override { return inner_->wait_fd(); }
  bool ready_to_block() override { return !has_deferred_work() && inner_->ready_to_block(); }
  bool has_deferred_work() const override;
  std::shared_ptr<const transport::DomainCounters> counters() const override { return inner_->counters(); }

  // Diagnostics (and tests).
  size_t free_buffers() const { return free_.size(); }
  size_t staged_writes() const { return writes_.size(); }
  bool staging_ready() const { return bounce_ != nullptr; }

  // Staged registrations get ids with this bit set; the inner domain's never have it.
  static constexpr uint64_t kStagedIdBit = 1ull << 63;

 private:
  struct StagedRegion {
    uint64_t id = 0;
    int device = -1;
  };
  struct StagedWrite;
  struct Chunk {  // one per bounce buffer, alive while it holds the buffer
    StagedWrite* write = nullptr;
    uint32_t index = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    bool with_imm = false;
  };
  struct StagedWrite {
    transport::WriteWr wr;  // as the caller posted it
    int device = -1;
    uint32_t chunks = 0;           // total
    uint32_t next_chunk = 0;       // next to get a buffer
    uint32_t finished = 0;         // chunks whose buffer went back (completed, failed or dropped)
    Chunk* held_imm = nullptr;     // the imm chunk, copied, waiting for its siblings
    bool failed = false;
    Status error;
    std::list<StagedWrite>::iterator self;
  };

  Status ensure_staging();
  const StagedRegion* find_region(const void* desc) const;
  uint8_t* buffer(const Chunk& c) const { return bounce_ + (&c - chunks_.data()) * options_.chunk_bytes; }
  bool is_chunk_context(uint64_t context) const;
  // Moves the pipeline along: buffers to waiting writes (copies start), finished copies to the
  // ready queue, ready chunks to the inner domain.
  void pump();
  // Starts the next chunk of `w` on a free buffer; false when the copy engine is full.
  bool start_chunk(StagedWrite* w);
  void on_copied(Chunk* c);
  void fail(StagedWrite* w, Status why);
  // The chunk's buffer goes back to the pool; its write may release its imm chunk or complete.
  void release_chunk(Chunk* c);
  // Counts never-started chunks of a failed write as finished.
  void drop_unstarted(StagedWrite* w);
  // Releases a held imm chunk whose siblings are done, completes a write whose chunks all are.
  // `w` may be gone afterwards.
  void check_write(StagedWrite* w);

  std::unique_ptr<transport::Domain> inner_;
  StagingGpuFactory gpu_factory_;
  const Options options_;
  std::unique_ptr<StagingGpu> gpu_;
  uint8_t* bounce_ = nullptr;
  transport::DomainMr bounce_mr_;
  std::vector<Chunk> chunks_;       // chunks_[i] uses bounce buffer i
  std::vector<uint32_t> free_;      // free buffer indices
  std::vector<std::unique_ptr<StagedRegion>> regions_;
  uint64_t next_region_id_ = 1;
  bool hmem_refused_ = false;       // the inner domain said Unsupported to GPU memory once
  std::string hmem_reason_;
  bool warned_transmit_complete_ = false;

  std::list<StagedWrite> writes_;          // accepted, not completed
  std::deque<StagedWrite*> waiting_;       // need more buffers (only the front may have started)
  size_t copying_ = 0;                     // chunks whose copy is in flight
  std::vector<gpu::CopyDone> copied_;      // scratch for CopyEngine::progress
  std::deque<Chunk*> ready_;               // bytes in the bounce buffer, to be posted
  std::vector<transport::Event> finished_; // completions of whole writes, to be reported
  std::vector<transport::Event> scratch_;
};

}  // namespace fabric_lib::transport::staging
