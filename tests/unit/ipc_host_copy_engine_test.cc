// HostCopyEngine on its own: gather copies (CopyRequest::segments) into another process with
// process_vm_writev — in slices that stop mid-segment and in batches past 1024 iovecs — and into
// this process with memcpy; a gather takes turns with other jobs; a failure ends the whole gather
// with the mapped error (a short write before an unmapped target page, a process that exited);
// GPU sources go through the bounce buffer segment by segment. Bytes are checked through memory
// the child process shares with this one (MAP_SHARED before the fork: the same pages, at the
// same address in both).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "transport/ipc/host_copy_engine.h"

namespace fabric_lib::transport::ipc {
namespace {

// A child process that holds `bytes` of memory shared with this one and waits. With
// `unmap_from` < bytes it unmaps [unmap_from, bytes) of its own mapping first.
class Child {
 public:
  explicit Child(size_t bytes, size_t unmap_from = SIZE_MAX) : bytes_(bytes) {
    memory = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (memory == MAP_FAILED || pipe(ready_) != 0 || pipe(hold_) != 0) return;
    std::memset(memory, 0, bytes);
    pid = fork();
    if (pid == 0) {
      close(hold_[1]);
      if (unmap_from < bytes) munmap(memory + unmap_from, bytes - unmap_from);
      const char one = 1;
      if (write(ready_[1], &one, 1) != 1) _exit(1);
      char c;
      while (read(hold_[0], &c, 1) > 0) {
      }
      _exit(0);
    }
    char c = 0;
    started = pid > 0 && read(ready_[0], &c, 1) == 1;
  }
  ~Child() {
    stop();
    for (int fd : {ready_[0], ready_[1], hold_[0], hold_[1]}) close(fd);
    if (memory != MAP_FAILED) munmap(memory, bytes_);
  }
  // Lets it exit and reaps it.
  void stop() {
    if (pid <= 0) return;
    close(hold_[1]);
    hold_[1] = -1;
    waitpid(pid, nullptr, 0);
    pid = -1;
  }

  uint8_t* memory = static_cast<uint8_t*>(MAP_FAILED);
  pid_t pid = -1;
  bool started = false;

 private:
  size_t bytes_;
  int ready_[2] = {-1, -1};
  int hold_[2] = {-1, -1};
};

uint8_t pattern(size_t segment, size_t i) { return static_cast<uint8_t>(segment * 29 + i * 3 + 7); }

// `count` segments of `length` bytes: source segment k (pattern(k, .)) at k * length, to target
// slot perm[k] * length.
struct Gather {
  uint64_t length;
  std::vector<uint8_t> src;
  std::vector<size_t> perm;
  std::vector<gpu::CopySegment> segments;
  Gather(size_t count, uint64_t len, uint32_t seed) : length(len), src(count * len), perm(count) {
    for (size_t k = 0; k < count; ++k) {
      for (size_t i = 0; i < len; ++i) src[k * len + i] = pattern(k, i);
    }
    std::iota(perm.begin(), perm.end(), size_t{0});
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    for (size_t k = 0; k < count; ++k) segments.push_back({k * len, perm[k] * len});
  }
  gpu::CopyRequest request(uint64_t op, uint32_t pid, const uint8_t* dst) const {
    gpu::CopyRequest r;
    r.op = op;
    r.src = src.data();
    r.length = length;
    r.dst_pid = pid;
    r.dst_addr = reinterpret_cast<uint64_t>(dst);
    r.segments = segments;
    return r;
  }
  // Segments [from, to) whose bytes are not at their target.
  size_t missing(const uint8_t* dst, size_t from, size_t to) const {
    size_t n = 0;
    for (size_t k = from; k < to; ++k) n += std::memcmp(dst + perm[k] * length, src.data() + k * length, length) != 0;
    return n;
  }
};

// Runs progress() until `ops` copies are reported (at most `max_calls` calls); returns the calls.
size_t progress_until(HostCopyEngine& engine, std::vector<gpu::CopyDone>& done, size_t ops, size_t max_calls = 100000) {
  size_t calls = 0;
  while (done.size() < ops && calls < max_calls) {
    engine.progress(done);
    ++calls;
  }
  return calls;
}

TEST(HostCopyEngine, AGatherLandsEverySegmentInAnotherProcessInSlicesAndInBatchesPast1024Iovecs) {
  // Segments of 1000 bytes: slices of 4 KiB end inside segments; one 64 MiB slice takes all
  // 2500 segments in three process_vm_writev calls.
  for (const uint64_t slice : {uint64_t{4096}, uint64_t{64} << 20}) {
    SCOPED_TRACE("slice " + std::to_string(slice));
    constexpr size_t kSegments = 2500;
    const Gather g(kSegments, 1000, 11);
    Child child(kSegments * 1000);
    ASSERT_TRUE(child.started);
    HostCopyEngine::Options o;
    o.slice_bytes = slice;
    o.budget_bytes = slice;
    HostCopyEngine engine(o);
    Status error;
    ASSERT_EQ(engine.submit(g.request(7, static_cast<uint32_t>(child.pid), child.memory), &error), gpu::CopySubmit::kAccepted)
        << error.to_string();
    EXPECT_EQ(engine.inflight(), 1u) << "a gather is one request";
    std::vector<gpu::CopyDone> done;
    const size_t calls = progress_until(engine, done, 1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].op, 7u);
    EXPECT_TRUE(done[0].status.ok()) << done[0].status.to_string();
    EXPECT_EQ(calls, (kSegments * 1000 + slice - 1) / slice) << "each progress() moves at most budget_bytes";
    EXPECT_EQ(engine.inflight(), 0u);
    EXPECT_EQ(g.missing(child.memory, 0, kSegments), 0u);
    engine.progress(done);
    EXPECT_EQ(done.size(), 1u) << "reported once";
  }
}

TEST(HostCopyEngine, AGatherIntoThisProcessTakesTurnsWithOtherCopies) {
  // 64 MiB of 4 KiB segments, then a plain 4 KiB copy: the small one finishes in the first
  // progress(), beside the first slice of the gather.
  const Gather g(16384, 4096, 5);
  std::vector<uint8_t> dst(g.src.size(), 0);
  std::vector<uint8_t> small_src(4096, 0x5a), small_dst(4096, 0);
  HostCopyEngine engine;  // 4 MiB slices, 16 MiB per progress()
  const uint32_t self = static_cast<uint32_t>(getpid());
  Status error;
  ASSERT_EQ(engine.submit(g.request(1, self, dst.data()), &error), gpu::CopySubmit::kAccepted);
  gpu::CopyRequest small;
  small.op = 2;
  small.src = small_src.data();
  small.length = small_src.size();
  small.dst_pid = self;
  small.dst_addr = reinterpret_cast<uint64_t>(small_dst.data());
  ASSERT_EQ(engine.submit(small, &error), gpu::CopySubmit::kAccepted);
  EXPECT_EQ(engine.inflight(), 2u);
  std::vector<gpu::CopyDone> done;
  engine.progress(done);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].op, 2u) << "the small copy overtakes the gather";
  EXPECT_EQ(small_dst, small_src);
  EXPECT_GT(g.missing(dst.data(), 0, 16384), 0u) << "the gather takes more than one progress()";
  progress_until(engine, done, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].op, 1u);
  EXPECT_TRUE(done[1].status.ok());
  EXPECT_EQ(g.missing(dst.data(), 0, 16384), 0u);
}

TEST(HostCopyEngine, ATargetPageMissingEndsTheWholeGatherAfterTheSegmentsBeforeIt) {
  // The child unmaps the second MiB of its mapping. Segment 10 goes there: the system call
  // writes segments 0-9 (a short write), the next one fails, and the gather ends with the error;
  // segments 11-15 (mapped again) are not written.
  constexpr uint64_t kLen = 64 * 1024;
  Child child(2 << 20, 1 << 20);
  ASSERT_TRUE(child.started);
  Gather g(16, kLen, 1);
  for (size_t k = 0; k < 16; ++k) {
    g.perm[k] = k == 10 ? 20 : k;  // slot 20: in the unmapped MiB
    g.segments[k].dst_offset = g.perm[k] * kLen;
  }
  HostCopyEngine engine;
  Status error;
  ASSERT_EQ(engine.submit(g.request(3, static_cast<uint32_t>(child.pid), child.memory), &error), gpu::CopySubmit::kAccepted);
  std::vector<gpu::CopyDone> done;
  progress_until(engine, done, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), ErrorCode::kProviderError) << done[0].status.to_string();
  EXPECT_NE(done[0].status.message().find("not mapped"), std::string::npos) << done[0].status.message();
  EXPECT_EQ(g.missing(child.memory, 0, 10), 0u) << "the segments before the fault landed";
  EXPECT_EQ(g.missing(child.memory, 11, 16), 5u) << "nothing after the failure was written";
  engine.progress(done);
  EXPECT_EQ(done.size(), 1u) << "reported once";
  EXPECT_EQ(engine.inflight(), 0u);
}

TEST(HostCopyEngine, AGatherIntoAProcessThatExitedFailsWithPeerUnreachable) {
  Child child(1 << 20);
  ASSERT_TRUE(child.started);
  const uint32_t pid = static_cast<uint32_t>(child.pid);
  uint8_t* memory = child.memory;
  child.stop();
  const Gather g(64, 4096, 2);
  HostCopyEngine engine;
  Status error;
  ASSERT_EQ(engine.submit(g.request(4, pid, memory), &error), gpu::CopySubmit::kAccepted);
  std::vector<gpu::CopyDone> done;
  progress_until(engine, done, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), ErrorCode::kPeerUnreachable) << done[0].status.to_string();
}

TEST(HostCopyEngine, AGatherFromTheGpuReadsEachSegmentThroughTheBounceBuffer) {
  // Segments of 8 KiB, a 4 KiB bounce buffer: two device reads per segment into another
  // process; into this process, one per segment, straight into the target.
  const Gather g(10, 8192, 9);
  int reads = 0;
  auto reader = [&reads](void* dst, const void* src, uint64_t length, int device) {
    if (device != 0) return invalid_argument("device " + std::to_string(device));
    ++reads;
    std::memcpy(dst, src, length);
    return ok_status();
  };
  Child child(g.src.size());
  ASSERT_TRUE(child.started);
  std::vector<uint8_t> local(g.src.size(), 0);
  for (const bool here : {false, true}) {
    SCOPED_TRACE(here ? "into this process" : "into another process");
    HostCopyEngine::Options o;
    o.bounce_bytes = 4096;
    HostCopyEngine engine(o);
    engine.set_device_reader(reader);
    reads = 0;
    gpu::CopyRequest r = g.request(5, here ? static_cast<uint32_t>(getpid()) : static_cast<uint32_t>(child.pid),
                                   here ? local.data() : child.memory);
    r.src_kind = MemoryKind::kCuda;
    r.src_device = 0;
    Status error;
    ASSERT_EQ(engine.submit(r, &error), gpu::CopySubmit::kAccepted) << error.to_string();
    std::vector<gpu::CopyDone> done;
    progress_until(engine, done, 1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_TRUE(done[0].status.ok()) << done[0].status.to_string();
    EXPECT_EQ(reads, here ? 10 : 20);
    EXPECT_EQ(g.missing(here ? local.data() : child.memory, 0, 10), 0u);
  }
}

TEST(HostCopyEngine, TheSegmentsAreCopiedAtSubmitAndJobSlotsAreReused) {
  // The caller's segments may change once submit() returns; many jobs through a small ring.
  std::vector<uint8_t> dst(64 * 256, 0);
  Gather g(64, 256, 4);
  HostCopyEngine engine;
  const uint32_t self = static_cast<uint32_t>(getpid());
  std::vector<gpu::CopyDone> done;
  for (uint64_t round = 0; round < 50; ++round) {
    Status error;
    std::vector<gpu::CopySegment> segments = g.segments;
    gpu::CopyRequest r = g.request(round, self, dst.data());
    r.segments = segments;
    ASSERT_EQ(engine.submit(r, &error), gpu::CopySubmit::kAccepted);
    std::fill(segments.begin(), segments.end(), gpu::CopySegment{0, 0});  // gone, as far as the engine knows
    if (round % 7 == 6) {
      std::fill(dst.begin(), dst.end(), 0);
      progress_until(engine, done, round + 1);
      EXPECT_EQ(g.missing(dst.data(), 0, 64), 0u) << "round " << round;
    }
  }
  progress_until(engine, done, 50);
  ASSERT_EQ(done.size(), 50u);
  for (const gpu::CopyDone& d : done) EXPECT_TRUE(d.status.ok());
}

}  // namespace
}  // namespace fabric_lib::transport::ipc
