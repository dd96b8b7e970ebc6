// The ipc domain's GPU path without a GPU: a fake backend serves "device memory" from a
// MAP_SHARED mapping made before fork(), so it sits at the same address in the parent and in the
// child that owns the target domain (standing in for CUDA IPC), and its copy engine finishes
// copies in reverse order. Checked across the two processes: the target sees every write's bytes
// when its imm arrives, each remote allocation is imported once however many regions it holds,
// imports close when the peer is removed, and a host source reaches a GPU target through the
// default device. Also: GPU sources into a peer's host memory, read through the backend in
// bounce-sized steps. And a paged write's run into a peer's GPU memory: one gather copy request,
// one imm record counting its pages, one completion event, every page in place at the first imm;
// a write's shards (WRs that continue each other) the same way as one plain copy; a run given as
// page lists (post_pages) the same way, its segments written into the copy engine's room when it
// offers one (the CUDA engine's pinned memory) and into the domain's own memory when not.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "ipc_test_support.h"

namespace fabric_lib::transport::ipc {
namespace {

constexpr size_t kAllocBytes = 8 << 20;
constexpr size_t kSlotBytes = 64 * 1024;
constexpr uint32_t kWrites = 48;

struct FakeCounters {
  int opens = 0;
  int closes = 0;
  int reads = 0;     // copy_to_host calls
  int submits = 0;   // copy requests accepted
  int segments = 0;  // copies of `length` bytes they asked for (a gather's segments or page pairs)
  int by_pages = 0;  // gathers submitted as page pairs (CopyRequest::pages)
  bool offer_room = false;  // the engine offers segment_room() and page_room()
  int in_room = 0;          // gathers submitted with their segments or pairs in that room
};

class FakeCopies final : public gpu::CopyEngine {
 public:
  explicit FakeCopies(FakeCounters* counters) : counters_(counters) {}
  gpu::CopySubmit submit(const gpu::CopyRequest& r, Status* error) override {
    if (!r.dst_ptr || r.dst_device != 0) {
      *error = invalid_argument("fake: no mapped target");
      return gpu::CopySubmit::kFailed;
    }
    ++counters_->submits;
    counters_->segments += static_cast<int>(gpu::segment_count(r));
    if (!r.segments.empty() && r.segments.data() == room_.data()) ++counters_->in_room;
    if (!r.pages.empty() && static_cast<const void*>(r.pages.data()) == room_.data()) ++counters_->in_room;
    if (!r.pages.empty()) ++counters_->by_pages;
    // The spans end with this call: keep the copies' offsets, as the real engines do.
    Queued q{r, {}};
    if (gpu::is_gather(r)) {
      for (size_t i = 0; i < gpu::segment_count(r); ++i) q.segments.push_back(gpu::copy_offsets(r, i));
    }
    q.request.segments = {};
    q.request.pages = {};
    queued_.push_back(std::move(q));
    return gpu::CopySubmit::kAccepted;
  }
  void progress(std::vector<gpu::CopyDone>& done) override {
    // Finish everything queued, newest first: completion order says nothing about posting order.
    while (!queued_.empty()) {
      const Queued q = std::move(queued_.back());
      queued_.pop_back();
      const gpu::CopyRequest& r = q.request;
      if (q.segments.empty()) std::memcpy(r.dst_ptr, r.src, r.length);
      for (const gpu::CopySegment& s : q.segments) {
        std::memcpy(static_cast<uint8_t*>(r.dst_ptr) + s.dst_offset, static_cast<const uint8_t*>(r.src) + s.src_offset, r.length);
      }
      done.push_back({r.op, ok_status()});
    }
  }
  std::span<gpu::CopySegment> segment_room(size_t n) override {
    if (!counters_->offer_room) return {};
    if (room_.size() < n) room_.resize(n);
    return room_;
  }
  std::span<gpu::CopyPagePair> page_room(size_t n) override {
    const std::span<gpu::CopySegment> room = segment_room((n + 1) / 2);
    return {reinterpret_cast<gpu::CopyPagePair*>(room.data()), room.size() * 2};
  }
  size_t inflight() const override { return queued_.size(); }
  void drain() override { queued_.clear(); }

 private:
  std::vector<gpu::CopySegment> room_;
  struct Queued {
    gpu::CopyRequest request;
    std::vector<gpu::CopySegment> segments;
  };
  FakeCounters* counters_;
  std::vector<Queued> queued_;
};

class FakeGpu final : public GpuBackend {
 public:
  FakeGpu(uint8_t* alloc, FakeCounters* counters) : alloc_(alloc), counters_(counters), copies_(counters) {}
  Result<GpuExport> export_region(void* ptr, size_t length, bool for_peers) override {
    auto* p = static_cast<uint8_t*>(ptr);
    GpuExport e;
    e.device = 0;
    if (!for_peers) return e;
    if (p < alloc_ || p + length > alloc_ + kAllocBytes) return invalid_argument("fake: outside the allocation");
    e.alloc_offset = static_cast<uint64_t>(p - alloc_);
    const uint64_t base = reinterpret_cast<uint64_t>(alloc_);
    std::memcpy(e.ipc_handle, &base, 8);
    return e;
  }
  Result<void*> open_import(const RegionInfo& region, int device) override {
    ++counters_->opens;
    uint64_t base = 0;
    std::memcpy(&base, region.ipc_handle, 8);
    return reinterpret_cast<void*>(base);  // the same address in both processes (MAP_SHARED before fork)
  }
  void close_import(void*, int) override { ++counters_->closes; }
  int default_device() const override { return 0; }
  gpu::CopyEngine& copies() override { return copies_; }
  Status copy_to_host(void* dst, const void* src, uint64_t length, int device) override {
    if (device != 0) return invalid_argument("fake: device " + std::to_string(device));
    ++counters_->reads;
    std::memcpy(dst, src, length);
    return ok_status();
  }

 private:
  uint8_t* alloc_;
  FakeCounters* counters_;
  FakeCopies copies_;
};

GpuBackendFactory fake_factory(uint8_t* alloc, FakeCounters* counters) {
  return [alloc, counters]() -> Result<std::unique_ptr<GpuBackend>> { return std::unique_ptr<GpuBackend>(new FakeGpu(alloc, counters)); };
}

uint8_t pattern(uint32_t write, size_t i) { return static_cast<uint8_t>(write * 13 + i * 7 + 1); }

// The target process: two regions in one allocation; counts imms and checks, at each arrival,
// that the write it announces is complete. Exit code 0 when all kWrites arrived intact.
// `target_kind`: how the target registers its two regions (kHost: written with process_vm_writev).
int run_target(uint8_t* alloc, int to_parent, int from_parent, MemoryKind target_kind = MemoryKind::kCuda) {
  FakeCounters counters;
  auto d = testing::open_domain(8192, fake_factory(alloc, &counters));
  if (!d) return 10;
  std::memset(alloc, 0, kAllocBytes);
  auto r1 = d->register_memory(alloc + 4096, kWrites / 2 * kSlotBytes, Access::kRemoteWrite, target_kind);
  auto r2 = d->register_memory(alloc + (4 << 20), kWrites / 2 * kSlotBytes, Access::kRemoteWrite, target_kind);
  if (!r1.ok() || !r2.ok()) return 11;
  const std::vector<uint8_t>& address = d->address();
  const uint32_t len = static_cast<uint32_t>(address.size());
  if (write(to_parent, &len, 4) != 4 || write(to_parent, address.data(), len) != static_cast<ssize_t>(len) ||
      write(to_parent, &r1->rkey, 8) != 8 || write(to_parent, &r2->rkey, 8) != 8) {
    return 12;
  }
  std::vector<Event> events;
  uint32_t arrived = 0;
  int bad = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (arrived < kWrites && std::chrono::steady_clock::now() < end) {
    events.clear();
    d->poll(events, 64);
    for (const Event& e : events) {
      if (e.kind != EventKind::kImm) continue;
      const uint32_t w = e.imm;  // write w went to region (w % 2), slot w / 2
      const uint8_t* at = alloc + (w % 2 ? (4 << 20) : 4096) + (w / 2) * kSlotBytes;
      for (size_t i = 0; i < kSlotBytes; ++i) bad += at[i] != pattern(w, i);
      arrived += e.count;  // 1: every write has its own imm
    }
  }
  char done = 0;
  if (read(from_parent, &done, 1) != 1) return 13;  // stay alive until the parent is finished
  return arrived == kWrites && bad == 0 ? 0 : 14;
}

TEST(IpcGpuPath, ImportsOnceCopiesUnorderedAndImmFollowsData) {
  auto* alloc = static_cast<uint8_t*>(mmap(nullptr, kAllocBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(alloc, MAP_FAILED);
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t child = fork();
  if (child == 0) _exit(run_target(alloc, up[1], down[0]));
  ASSERT_GT(child, 0);
  uint32_t len = 0;
  ASSERT_EQ(read(up[0], &len, 4), 4);
  ASSERT_LE(len, 256u);
  std::vector<uint8_t> address(len);
  uint64_t rkeys[2];
  ASSERT_EQ(read(up[0], address.data(), len), static_cast<ssize_t>(len));
  ASSERT_EQ(read(up[0], &rkeys[0], 8), 8);
  ASSERT_EQ(read(up[0], &rkeys[1], 8), 8);

  // The writer's own "GPU" source lives in private memory (any device pointer will do for the fake).
  FakeCounters counters;
  static uint8_t source_alloc[kAllocBytes];
  auto d = testing::open_domain(8192, fake_factory(source_alloc, &counters));
  ASSERT_TRUE(d);
  std::vector<uint8_t> host_src(kWrites * kSlotBytes);
  for (uint32_t w = 0; w < kWrites; ++w) {
    for (size_t i = 0; i < kSlotBytes; ++i) {
      (w % 3 ? source_alloc : host_src.data())[w * kSlotBytes + i] = pattern(w, i);
    }
  }
  auto gpu_src = d->register_memory(source_alloc, kWrites * kSlotBytes, Access::kLocalOnly, MemoryKind::kCuda);
  auto host_mr = d->register_memory(host_src.data(), host_src.size(), Access::kLocalOnly, MemoryKind::kHost);
  ASSERT_TRUE(gpu_src.ok() && host_mr.ok());
  Result<PeerHandle> peer = d->add_peer(address);
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  Status error;
  for (uint32_t w = 0; w < kWrites; ++w) {
    const bool from_gpu = w % 3 != 0;  // every third write comes from host memory
    WriteWr wr;
    wr.src = (from_gpu ? source_alloc : host_src.data()) + w * kSlotBytes;
    wr.src_desc = from_gpu ? gpu_src->desc : host_mr->desc;
    wr.length = kSlotBytes;
    wr.peer = *peer;
    wr.remote_addr = (w / 2) * kSlotBytes;
    wr.rkey = rkeys[w % 2];
    wr.has_imm = true;
    wr.imm = w;
    wr.context = w;
    ASSERT_EQ(d->post_write(wr, &error), PostResult::kPosted) << error.to_string();
  }
  std::vector<Event> events;
  ASSERT_TRUE(testing::poll_until({d.get()}, {&events}, [&] { return events.size() == kWrites; }));
  for (const Event& e : events) EXPECT_TRUE(e.status.ok()) << e.status.to_string();
  EXPECT_EQ(counters.opens, 1) << "two regions of one allocation: one import";
  EXPECT_EQ(d->imports_open(), 1u);
  d->remove_peer(*peer);
  EXPECT_EQ(counters.closes, 1);
  EXPECT_EQ(d->peers(), 0u);
  const char done = 1;
  ASSERT_EQ(write(down[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the target saw a missing or incomplete write (see run_target)";
  munmap(alloc, kAllocBytes);
  for (int fd : {up[0], up[1], down[0], down[1]}) close(fd);
}

TEST(IpcGpuPath, GpuSourceReachesAPeersHostMemoryThroughBounceSteps) {
  auto* alloc = static_cast<uint8_t*>(mmap(nullptr, kAllocBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(alloc, MAP_FAILED);
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t child = fork();
  if (child == 0) _exit(run_target(alloc, up[1], down[0], MemoryKind::kHost));
  ASSERT_GT(child, 0);
  uint32_t len = 0;
  ASSERT_EQ(read(up[0], &len, 4), 4);
  ASSERT_LE(len, 256u);
  std::vector<uint8_t> address(len);
  uint64_t rkeys[2];
  ASSERT_EQ(read(up[0], address.data(), len), static_cast<ssize_t>(len));
  ASSERT_EQ(read(up[0], &rkeys[0], 8), 8);
  ASSERT_EQ(read(up[0], &rkeys[1], 8), 8);

  FakeCounters counters;
  static uint8_t source_alloc[kAllocBytes];
  IpcOptions o;
  o.geometry.table_entries = 64;
  o.gpu = fake_factory(source_alloc, &counters);
  o.host_copies.bounce_bytes = kSlotBytes / 4;  // each write takes 4 device reads
  Result<std::unique_ptr<IpcDomain>> opened = IpcDomain::open(std::move(o));
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  IpcDomain& d = **opened;
  for (uint32_t w = 0; w < kWrites; ++w) {
    for (size_t i = 0; i < kSlotBytes; ++i) source_alloc[w * kSlotBytes + i] = pattern(w, i);
  }
  auto gpu_src = d.register_memory(source_alloc, kWrites * kSlotBytes, Access::kLocalOnly, MemoryKind::kCuda);
  ASSERT_TRUE(gpu_src.ok()) << gpu_src.status().to_string();
  Result<PeerHandle> peer = d.add_peer(address);
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  Status error;
  for (uint32_t w = 0; w < kWrites; ++w) {
    WriteWr wr;
    wr.src = source_alloc + w * kSlotBytes;
    wr.src_desc = gpu_src->desc;
    wr.length = kSlotBytes;
    wr.peer = *peer;
    wr.remote_addr = (w / 2) * kSlotBytes;
    wr.rkey = rkeys[w % 2];
    wr.has_imm = true;
    wr.imm = w;
    wr.context = w;
    ASSERT_EQ(d.post_write(wr, &error), PostResult::kPosted) << error.to_string();
  }
  std::vector<Event> events;
  ASSERT_TRUE(testing::poll_until({&d}, {&events}, [&] { return events.size() == kWrites; }));
  for (const Event& e : events) EXPECT_TRUE(e.status.ok()) << e.status.to_string();
  EXPECT_EQ(counters.reads, static_cast<int>(kWrites * 4)) << "every byte read from the device once, in bounce steps";
  EXPECT_EQ(counters.opens, 0) << "host targets map no GPU allocation";
  const char done = 1;
  ASSERT_EQ(write(down[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the target saw a missing or incomplete write (see run_target)";
  munmap(alloc, kAllocBytes);
  for (int fd : {up[0], up[1], down[0], down[1]}) close(fd);
}

// A paged write's run into a peer's GPU memory: the target process registers one "GPU" region,
// counts imm arrivals, and checks at the first that every page is in place; it reports what it
// saw through `to_parent`. Source page i goes to target page perm[i].
constexpr size_t kPage = 4096;

struct RunReport {
  uint64_t arrivals = 0;
  uint64_t events = 0;
  uint64_t intact_at_first_imm = 0;
};

// `arrivals`: the imm arrivals to wait for (the run's WRs).
int run_page_target(uint8_t* alloc, int to_parent, int from_parent, const std::vector<size_t>& perm, uint64_t arrivals) {
  FakeCounters counters;
  auto d = testing::open_domain(8192, fake_factory(alloc, &counters));
  if (!d) return 10;
  std::memset(alloc, 0, kAllocBytes);
  auto r = d->register_memory(alloc + 4096, perm.size() * kPage, Access::kRemoteWrite, MemoryKind::kCuda);
  if (!r.ok()) return 11;
  const std::vector<uint8_t>& address = d->address();
  const uint32_t len = static_cast<uint32_t>(address.size());
  if (write(to_parent, &len, 4) != 4 || write(to_parent, address.data(), len) != static_cast<ssize_t>(len) ||
      write(to_parent, &r->rkey, 8) != 8) {
    return 12;
  }
  auto intact = [&] {
    for (size_t p = 0; p < perm.size(); ++p) {
      const uint8_t* at = alloc + 4096 + perm[p] * kPage;
      for (size_t i = 0; i < kPage; ++i) {
        if (at[i] != pattern(static_cast<uint32_t>(p), i)) return false;
      }
    }
    return true;
  };
  RunReport report;
  std::vector<Event> events;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (report.arrivals < arrivals && std::chrono::steady_clock::now() < end) {
    events.clear();
    d->poll(events, 64);
    for (const Event& e : events) {
      if (e.kind != EventKind::kImm || e.imm != 55) continue;
      if (report.events++ == 0) report.intact_at_first_imm = intact();
      report.arrivals += e.count;
    }
  }
  if (write(to_parent, &report, sizeof(report)) != static_cast<ssize_t>(sizeof(report))) return 13;
  char done = 0;
  return read(from_parent, &done, 1) == 1 ? 0 : 14;  // stay alive until the parent is finished
}

// How the source posts: as WriteWrs (post_writes) or as page lists (post_pages, one page per
// WR), with the copy engine offering room for the segments or not.
struct Posting {
  bool as_pages = false;
  bool room = false;
};

// Source page p goes to target page perm[p]; WR k covers the next wr_pages[k] source pages (one
// page each for a paged write's run; several for a write's shards, which continue each other).
// Expected: one copy request with `segments` segments, one imm record and one completion event,
// both counting the WRs, every page in place at the first imm.
void expect_one_copy_into_peers_gpu(const std::vector<size_t>& perm, const std::vector<size_t>& wr_pages,
                                    int segments, Posting posting = {}) {
  const size_t kPages = perm.size();
  const uint64_t wrs = wr_pages.size();
  auto* alloc = static_cast<uint8_t*>(mmap(nullptr, kAllocBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(alloc, MAP_FAILED);
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(up[0]);
    close(down[1]);
    _exit(run_page_target(alloc, up[1], down[0], perm, wrs));
  }
  ASSERT_GT(child, 0);
  // A failed assertion returns early: the child must not outlive the test.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } reaper{child};
  uint32_t len = 0;
  ASSERT_EQ(read(up[0], &len, 4), 4);
  ASSERT_LE(len, 256u);
  std::vector<uint8_t> address(len);
  uint64_t rkey = 0;
  ASSERT_EQ(read(up[0], address.data(), len), static_cast<ssize_t>(len));
  ASSERT_EQ(read(up[0], &rkey, 8), 8);

  FakeCounters counters;
  counters.offer_room = posting.room;
  static uint8_t source_alloc[kAllocBytes];
  auto d = testing::open_domain(8192, fake_factory(source_alloc, &counters));
  ASSERT_TRUE(d);
  for (size_t p = 0; p < kPages; ++p) {
    for (size_t i = 0; i < kPage; ++i) source_alloc[p * kPage + i] = pattern(static_cast<uint32_t>(p), i);
  }
  auto gpu_src = d->register_memory(source_alloc, kPages * kPage, Access::kLocalOnly, MemoryKind::kCuda);
  ASSERT_TRUE(gpu_src.ok()) << gpu_src.status().to_string();
  Result<PeerHandle> peer = d->add_peer(address);
  ASSERT_TRUE(peer.ok()) << peer.status().to_string();
  PostResult last = PostResult::kFailed;
  Status error;
  if (posting.as_pages) {
    std::vector<uint32_t> src_pages, dst_pages;
    for (size_t p = 0; p < kPages; ++p) {
      src_pages.push_back(static_cast<uint32_t>(p));
      dst_pages.push_back(static_cast<uint32_t>(perm[p]));
    }
    PageRunWr pages;
    pages.src = source_alloc;
    pages.src_desc = gpu_src->desc;
    pages.peer = *peer;
    pages.rkey = rkey;
    pages.page_length = kPage;
    pages.src_stride = pages.dst_stride = kPage;
    pages.src_pages = src_pages.data();
    pages.dst_pages = dst_pages.data();
    pages.count = kPages;
    pages.has_imm = true;
    pages.imm = 55;
    pages.context = 12;
    ASSERT_EQ(d->post_pages(pages, &last, &error), wrs) << error.to_string();
  } else {
    std::vector<WriteWr> run;
    for (size_t k = 0, p = 0; k < wr_pages.size(); p += wr_pages[k++]) {
      run.push_back(testing::write_wr(source_alloc + p * kPage, gpu_src->desc, wr_pages[k] * kPage, *peer, perm[p] * kPage, rkey, 55u, 12));
    }
    ASSERT_EQ(d->post_writes(run, &last, &error), wrs) << error.to_string();
  }
  EXPECT_EQ(last, PostResult::kPosted);
  EXPECT_EQ(counters.submits, 1) << "the run is one copy request";
  EXPECT_EQ(counters.segments, segments);
  EXPECT_EQ(counters.in_room, posting.room && segments > 1 ? 1 : 0) << "the gather's segments in the engine's room";
  EXPECT_EQ(counters.by_pages, posting.as_pages ? 1 : 0) << "a page list goes as page index pairs, WRs as segments";
  std::vector<Event> events;
  ASSERT_TRUE(testing::poll_until({d.get()}, {&events}, [&] { return testing::count_of(events, EventKind::kWriteDone) >= wrs; }));
  RunReport report;
  ASSERT_EQ(read(up[0], &report, sizeof(report)), static_cast<ssize_t>(sizeof(report)));
  EXPECT_EQ(report.arrivals, wrs) << "one imm arrival per WR";
  EXPECT_EQ(report.events, 1u) << "one imm record for the run";
  EXPECT_EQ(report.intact_at_first_imm, 1u) << "the imm arrived before every page was in place";
  for (int i = 0; i < 20; ++i) d->poll(events, 64);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].count, wrs);
  EXPECT_TRUE(events[0].status.ok()) << events[0].status.to_string();
  const char done = 1;
  ASSERT_EQ(write(down[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  reaper.pid = -1;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  munmap(alloc, kAllocBytes);
  for (int fd : {up[0], up[1], down[0], down[1]}) close(fd);
}

std::vector<size_t> shuffled_pages() {
  constexpr size_t kPages = 300;
  std::vector<size_t> perm(kPages);
  for (size_t p = 0; p < kPages; ++p) perm[p] = (p * 7 + 3) % kPages;  // 7 is prime to 300: a permutation
  return perm;
}

TEST(IpcGpuPath, APagedRunIsOneGatherCopyAndOneImmRecordIntoAPeersGpuMemory) {
  expect_one_copy_into_peers_gpu(shuffled_pages(), std::vector<size_t>(300, 1), /*segments=*/300);
}

// The same run with its segments written into the copy engine's room (where the CUDA engine's
// kernel reads them), as WriteWrs and as page lists; and as page lists without room.
TEST(IpcGpuPath, APagedRunsSegmentsGoIntoTheCopyEnginesRoomWhenOffered) {
  expect_one_copy_into_peers_gpu(shuffled_pages(), std::vector<size_t>(300, 1), 300, {.as_pages = false, .room = true});
  expect_one_copy_into_peers_gpu(shuffled_pages(), std::vector<size_t>(300, 1), 300, {.as_pages = true, .room = true});
}

TEST(IpcGpuPath, APageListIsOneGatherCopyWithoutTheCopyEnginesRoom) {
  expect_one_copy_into_peers_gpu(shuffled_pages(), std::vector<size_t>(300, 1), 300, {.as_pages = true, .room = false});
}

// A write's shards on one domain (the engine's placement on a one-medium group): WRs of unequal
// lengths, each starting where the last ended on both sides, become ONE plain copy of them all.
TEST(IpcGpuPath, AWritesShardsAreOnePlainCopyAndOneImmRecordIntoAPeersGpuMemory) {
  constexpr size_t kPages = 300;
  std::vector<size_t> perm(kPages);
  for (size_t p = 0; p < kPages; ++p) perm[p] = p;
  expect_one_copy_into_peers_gpu(perm, {80, 80, 80, 60}, /*segments=*/1);
}

}  // namespace
}  // namespace fabric_lib::transport::ipc
