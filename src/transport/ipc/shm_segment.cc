#include "transport/ipc/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>

#include "base/log.h"

namespace fabric_lib::transport::ipc {
namespace {

constexpr uint64_t kMaxSlots = uint64_t{1} << 22;
constexpr uint64_t kMaxTableEntries = uint64_t{1} << 20;
constexpr const char* kShmDir = "/dev/shm/";

bool power_of_two(uint64_t v) { return v && (v & (v - 1)) == 0; }
std::string errno_text() { return std::strerror(errno); }
std::string fifo_path(const std::string& name) { return kShmDir + name + ".wake"; }

uint64_t random_u64() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}() ^ (static_cast<uint64_t>(getpid()) << 32));
  std::lock_guard lock(mu);
  return rng();
}

}  // namespace

ShmSegment::~ShmSegment() {
  if (owner_ && header_) mark_closed();
  if (base_) munmap(base_, bytes_);
  if (shm_fd_ >= 0) close(shm_fd_);
  if (fifo_read_ >= 0) close(fifo_read_);
  if (fifo_write_ >= 0) close(fifo_write_);
  if (owner_) {
    shm_unlink(("/" + name_).c_str());
    unlink(fifo_path(name_).c_str());
  }
}

Status ShmSegment::map(int fd, uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return resource_exhausted("mmap of ipc segment " + name_ + ": " + errno_text());
  base_ = p;
  bytes_ = bytes;
  header_ = static_cast<SegmentHeader*>(p);
  return ok_status();
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::create(const ProcessIdentity& self, Geometry g) {
  if (!power_of_two(g.slots) || g.slots < 64 || g.slots > kMaxSlots) return invalid_argument("ipc ring slots must be a power of two in 64..2^22");
  if (!power_of_two(g.table_entries) || g.table_entries > kMaxTableEntries) {
    return invalid_argument("ipc registration table entries must be a power of two <= 2^20");
  }
  remove_stale_segments();
  static std::atomic<uint64_t> counter{0};
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->owner_ = true;
  seg->nonce_ = random_u64() | 1;
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), "%08llx", static_cast<unsigned long long>(seg->nonce_ & 0xffffffffull));
  seg->name_ = std::string(kSegmentPrefix) + std::to_string(self.pid) + "-" + std::to_string(self.start_time) + "-" +
               std::to_string(counter.fetch_add(1)) + "-" + suffix;

  const uint64_t ring_offset = kHeaderBytes;
  const uint64_t table_offset = ring_offset + g.slots * kSlotBytes;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t bytes = (table_offset + g.table_entries * kRegionEntryBytes + page - 1) / page * page;

  const std::string shm_name = "/" + seg->name_;
  seg->shm_fd_ = shm_open(shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (seg->shm_fd_ < 0) {
    return unsupported("shm_open(" + shm_name + "): " + errno_text() + " (the ipc domain needs POSIX shared memory in /dev/shm)");
  }
  if (ftruncate(seg->shm_fd_, static_cast<off_t>(bytes)) != 0) {
    const std::string why = errno_text();
    shm_unlink(shm_name.c_str());
    seg->owner_ = false;  // nothing else to clean up by name
    return resource_exhausted("ftruncate of ipc segment to " + std::to_string(bytes) + " bytes: " + why);
  }
  Status mapped = seg->map(seg->shm_fd_, bytes);
  if (!mapped.ok()) return mapped;  // the destructor unlinks

  SegmentHeader* h = seg->header_;
  std::memcpy(h->magic, kSegmentMagic, sizeof(h->magic));
  h->version = kSegmentVersion;
  h->slot_bytes = kSlotBytes;
  h->slots = g.slots;
  h->table_entries = g.table_entries;
  h->ring_offset = ring_offset;
  h->table_offset = table_offset;
  h->segment_bytes = bytes;
  h->owner_pid = self.pid;
  h->owner_start_time = self.start_time;
  h->nonce = seg->nonce_;
  h->consumer_sleeping.store(0, std::memory_order_relaxed);
  h->closed.store(0, std::memory_order_relaxed);
  seg->ring_ = RingView{h, reinterpret_cast<Slot*>(static_cast<uint8_t*>(seg->base_) + ring_offset), g.slots};
  init_ring(seg->ring_);
  seg->table_ = reinterpret_cast<RegionEntry*>(static_cast<uint8_t*>(seg->base_) + table_offset);
  seg->table_entries_ = g.table_entries;  // ftruncate zeroed it: every key is 0 (free)

  const std::string fifo = fifo_path(seg->name_);
  if (mkfifo(fifo.c_str(), 0600) != 0) return unsupported("mkfifo(" + fifo + "): " + errno_text());
  seg->fifo_read_ = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (seg->fifo_read_ >= 0) seg->fifo_write_ = open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (seg->fifo_read_ < 0 || seg->fifo_write_ < 0) return unsupported("opening " + fifo + ": " + errno_text());
  return seg;
}

Result<std::unique_ptr<ShmSegment>> ShmSegment::attach(const IpcAddress& address) {
  if (!valid_segment_name(address.segment_name)) return malformed("bad ipc segment name");
  std::unique_ptr<ShmSegment> seg(new ShmSegment());
  seg->name_ = address.segment_name;
  const std::string shm_name = "/" + seg->name_;
  const std::string who = "the peer's ipc segment " + shm_name + " (process " + std::to_string(address.owner.pid) + ")";
  if (!process_alive(address.owner.pid, address.owner.start_time)) {
    return Status(ErrorCode::kPeerUnreachable, "the peer process " + std::to_string(address.owner.pid) + " has exited");
  }
  seg->shm_fd_ = shm_open(shm_name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (seg->shm_fd_ < 0) {
    return Status(ErrorCode::kPeerUnreachable, "cannot open " + who + ": " + errno_text() +
                                                   " (closed domain, or another /dev/shm: ipc needs one host and one IPC namespace)");
  }
  struct stat st{};
  if (fstat(seg->shm_fd_, &st) != 0) return Status(ErrorCode::kPeerUnreachable, "fstat of " + who + ": " + errno_text());
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes || size > (uint64_t{1} << 32)) return malformed(who + " has an implausible size " + std::to_string(size));
  FABRIC_LIB_RETURN_IF_ERROR(seg->map(seg->shm_fd_, size));

  // Copy the geometry once and check it against the mapping; never re-read it later.
  const SegmentHeader* h = seg->header_;
  if (std::memcmp(h->magic, kSegmentMagic, sizeof(kSegmentMagic)) != 0 || h->version != kSegmentVersion) {
    return malformed(who + " is not an ipc segment of this version");
  }
  const uint64_t slots = h->slots, entries = h->table_entries, ring_offset = h->ring_offset, table_offset = h->table_offset;
  const bool geometry_ok = h->slot_bytes == kSlotBytes && power_of_two(slots) && slots >= 64 && slots <= kMaxSlots &&
                           power_of_two(entries) && entries <= kMaxTableEntries && ring_offset >= kHeaderBytes &&
                           ring_offset % 64 == 0 && table_offset % 64 == 0 &&
                           ring_offset + slots * kSlotBytes <= table_offset &&
                           table_offset + entries * kRegionEntryBytes <= size;
  if (!geometry_ok) return malformed(who + " has an inconsistent layout");
  if (h->owner_pid != address.owner.pid || h->owner_start_time != address.owner.start_time || h->nonce != address.nonce) {
    return Status(ErrorCode::kPeerUnreachable, who + " belongs to another domain than the address names (a stale address?)");
  }
  seg->nonce_ = h->nonce;
  seg->ring_ = RingView{seg->header_, reinterpret_cast<Slot*>(static_cast<uint8_t*>(seg->base_) + ring_offset), slots};
  seg->table_ = reinterpret_cast<RegionEntry*>(static_cast<uint8_t*>(seg->base_) + table_offset);
  seg->table_entries_ = entries;
  if (seg->closed()) return Status(ErrorCode::kPeerUnreachable, who + " was closed by its owner");
  // O_RDWR, not O_WRONLY: holding a read end ourselves, a write to the FIFO of an owner that died
  // never raises SIGPIPE (which would kill the user's process); it fills the pipe and gets EAGAIN.
  seg->fifo_write_ = open(fifo_path(seg->name_).c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (seg->fifo_write_ < 0) {
    return Status(ErrorCode::kPeerUnreachable, "cannot open the wake-up FIFO of " + who + ": " + errno_text());
  }
  return seg;
}

void ShmSegment::drain_wakeups() {
  char buf[256];
  while (fifo_read_ >= 0 && read(fifo_read_, buf, sizeof(buf)) > 0) {
  }
}

void ShmSegment::mark_closed() { header_->closed.store(1, std::memory_order_release); }

void ShmSegment::wake_owner() {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // our publish before reading the flag (pairs with the owner's)
  if (header_->consumer_sleeping.load(std::memory_order_relaxed) == 0) return;
  if (header_->consumer_sleeping.exchange(0, std::memory_order_acq_rel) == 0) return;  // another producer woke it
  const char byte = 1;
  if (write(fifo_write_, &byte, 1) < 0 && errno != EAGAIN) FL_LOG_DEBUG("ipc wake-up of {}: {}", name_, errno_text());
}

void ShmSegment::publish_region(uint64_t slot, const RegionInfo& info) {
  RegionEntry& e = table_[slot & (table_entries_ - 1)];
  e.key.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.base.store(info.base, std::memory_order_relaxed);
  e.length.store(info.length, std::memory_order_relaxed);
  e.kind_device.store(static_cast<uint64_t>(info.kind) | static_cast<uint64_t>(info.device + 1) << 8, std::memory_order_relaxed);
  e.alloc_offset.store(info.alloc_offset, std::memory_order_relaxed);
  for (int i = 0; i < 8; ++i) {
    uint64_t w = 0;
    std::memcpy(&w, info.ipc_handle + 8 * i, 8);
    e.ipc_handle[i].store(w, std::memory_order_relaxed);
  }
  e.key.store(info.key, std::memory_order_release);
}

void ShmSegment::clear_region(uint64_t slot) { table_[slot & (table_entries_ - 1)].key.store(0, std::memory_order_release); }

Result<RegionInfo> ShmSegment::lookup_region(uint64_t key) const {
  if (key == 0) return not_found("remote key 0");
  const RegionEntry& e = table_[key_slot(key, table_entries_)];
  const uint64_t k1 = e.key.load(std::memory_order_acquire);
  RegionInfo info;
  info.key = key;
  info.base = e.base.load(std::memory_order_relaxed);
  info.length = e.length.load(std::memory_order_relaxed);
  const uint64_t kd = e.kind_device.load(std::memory_order_relaxed);
  info.alloc_offset = e.alloc_offset.load(std::memory_order_relaxed);
  for (int i = 0; i < 8; ++i) {
    const uint64_t w = e.ipc_handle[i].load(std::memory_order_relaxed);
    std::memcpy(info.ipc_handle + 8 * i, &w, 8);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t k2 = e.key.load(std::memory_order_relaxed);
  if (k1 != key || k2 != key) {
    return not_found("remote key 0x" + [&] {
      char b[24];
      std::snprintf(b, sizeof(b), "%llx", static_cast<unsigned long long>(key));
      return std::string(b);
    }() + " names no registered region at the peer (forged, or unregistered since)");
  }
  const uint8_t kind = static_cast<uint8_t>(kd & 0xff);
  if (kind != static_cast<uint8_t>(MemoryKind::kHost) && kind != static_cast<uint8_t>(MemoryKind::kCuda)) {
    return malformed("the peer's registration table holds an unknown memory kind");
  }
  info.kind = static_cast<MemoryKind>(kind);
  info.device = static_cast<int>((kd >> 8) & 0xffff) - 1;
  return info;
}

size_t remove_stale_segments() {
  static std::once_flag once;
  static size_t removed = 0;
  std::call_once(once, [] {
    DIR* dir = opendir(kShmDir);
    if (!dir) return;
    const std::string prefix = kSegmentPrefix;
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      // "<prefix><pid>-<start time>-<counter>-<nonce>[.wake]"
      unsigned long pid = 0;
      unsigned long long start = 0;
      if (std::sscanf(name.c_str() + prefix.size(), "%lu-%llu-", &pid, &start) != 2 || pid == 0 || pid > kPidMask) continue;
      if (process_alive(static_cast<uint32_t>(pid), start)) continue;
      if (unlink((kShmDir + name).c_str()) == 0) ++removed;
    }
    closedir(dir);
    if (removed) FL_LOG_INFO("ipc: removed {} stale shared-memory files of exited processes", removed);
  });
  return removed;
}

}  // namespace fabric_lib::transport::ipc
