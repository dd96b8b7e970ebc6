#include "transport/libfabric/libfabric_domain.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "gpu/memory_kind.h"
#include "transport/libfabric/completion_error.h"
#include "transport/libfabric/stale_shm.h"

namespace fabric_lib::transport::libfabric {
namespace {

// The tag of control messages; application sends are untagged, so the two never mix.
constexpr uint64_t kControlTag = 0xF1AB'C0DE'0000'0001ull;
uint64_t detail_control_tag() { return kControlTag; }

constexpr size_t kScratchBytes = 64;
// Peers' addresses are copied into a zero-padded buffer before fi_av_insert: providers parse
// them as sockaddrs or C strings, and the bytes come from the network.
constexpr size_t kAddressPadding = 64;

uint64_t fi_access_of(Access access) {
  uint64_t flags = FI_WRITE | FI_READ | FI_SEND | FI_RECV;
  if (has_access(access, Access::kRemoteWrite)) flags |= FI_REMOTE_WRITE;
  if (has_access(access, Access::kRemoteRead)) flags |= FI_REMOTE_READ;
  return flags;
}

void close_fid(fid_t fid, const char* what) {
  if (!fid) return;
  int ret = fi_close(fid);
  if (ret != 0) FL_LOG_DEBUG("fi_close({}) returned {}", what, fi_strerror(-ret));
}

// EFA takes shortcuts around the NIC unless told not to: a shared-memory path to peers of the
// same host, and CUDA API copies for GPU memory. Benchmarks and production want the bytes to cross
// the NIC, so both are turned off where libfabric offers the endpoint options (the shared-memory
// one since 1.21; older libfabrics read FI_EFA_ENABLE_SHM_TRANSFER, which the engine's backend
// factory sets). A provider that refuses an option keeps its default, which is logged.
void restrict_efa_shortcuts(fid_ep* ep, bool hmem) {
  [[maybe_unused]] auto set_false = [ep](int option, const char* name) {
    bool permitted = false;
    const int ret = fi_setopt(&ep->fid, FI_OPT_ENDPOINT, option, &permitted, sizeof(permitted));
    if (ret != 0) FL_LOG_INFO("efa: fi_setopt({}, false): {}; the provider keeps its default", name, fi_strerror(-ret));
  };
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 21))
  set_false(FI_OPT_SHARED_MEMORY_PERMITTED, "FI_OPT_SHARED_MEMORY_PERMITTED");
#endif
#if FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 18))
  if (hmem) set_false(FI_OPT_CUDA_API_PERMITTED, "FI_OPT_CUDA_API_PERMITTED");
#else
  (void)hmem;
#endif
}

}  // namespace

Result<std::unique_ptr<LibfabricDomain>> LibfabricDomain::open(const LibfabricDomainOptions& options) {
  std::unique_ptr<LibfabricDomain> domain(new LibfabricDomain());
  Status status = domain->open_resources(options);
  if (!status.ok()) return status;
  return domain;
}

Status LibfabricDomain::open_resources(const LibfabricDomainOptions& options) {
  Result<FiInfoPtr> selected = select_fi_info(options.provider, options.interface_name, options.want_hmem);
  if (!selected.ok()) return selected.status();
  fi_ = std::move(selected).value();
  mr_mode_ = static_cast<uint64_t>(fi_->domain_attr->mr_mode);

  int ret = fi_fabric(fi_->fabric_attr, &fabric_, nullptr);
  if (ret) return provider_error("fi_fabric", ret);
  ret = fi_domain(fabric_, fi_.get(), &domain_, nullptr);
  if (ret) return provider_error("fi_domain", ret);

  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = options.cq_size;
  cq_attr.wait_obj = options.want_wait_fd ? FI_WAIT_FD : FI_WAIT_NONE;
  ret = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  if (ret == 0 && options.want_wait_fd) {
    int fd = -1;
    if (fi_control(&cq_->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
      wait_fd_ = fd;
    } else {  // the CQ accepted FI_WAIT_FD but cannot hand out the fd: use a plain CQ
      close_fid(&cq_->fid, "cq");
      cq_ = nullptr;
      ret = -FI_ENOSYS;
    }
  }
  if (ret != 0 && options.want_wait_fd) {
    cq_attr.wait_obj = FI_WAIT_NONE;
    ret = fi_cq_open(domain_, &cq_attr, &cq_, nullptr);
  }
  if (ret) return provider_error("fi_cq_open", ret);

  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  ret = fi_av_open(domain_, &av_attr, &av_, nullptr);
  if (ret) return provider_error("fi_av_open", ret);

  // Before shm names its region after our pid: a dead process's region of that name would make
  // fi_enable fail with EBUSY (stale_shm.h).
  const char* prov = fi_->fabric_attr->prov_name;
  if (prov && std::strcmp(prov, "shm") == 0) remove_stale_shm_regions();
  Status endpoint = open_endpoint();
  if (!endpoint.ok()) return endpoint;

  size_t len = kMaxDomainAddressBytes;
  address_.resize(len);
  ret = fi_getname(&ep_->fid, address_.data(), &len);
  if (ret) return provider_error("fi_getname", ret);
  address_.resize(len);

  info_.transport = TransportKind::kLibfabric;
  info_.provider = fi_->fabric_attr->prov_name ? fi_->fabric_attr->prov_name : options.provider;
  info_.fabric = fi_->fabric_attr->name ? fi_->fabric_attr->name : "";
  info_.name = fi_->domain_attr->name ? fi_->domain_attr->name : "";
  info_.max_inflight = fi_->tx_attr->size > 0 ? fi_->tx_attr->size : 256;
  info_.max_msg_bytes = fi_->ep_attr->max_msg_size;
  info_.delivery_complete = (fi_->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;
  info_.hmem = (fi_->caps & FI_HMEM) != 0;
  info_.calls_may_hang_on_dead_peer = info_.provider == "shm";
  tagged_ = (fi_->caps & FI_TAGGED) != 0;
  for (const char* p : {"tcp", "sockets", "udp", "net"}) {
    if (info_.provider.rfind(p, 0) == 0) socket_provider_ = true;
  }
  keep_av_entries_ = info_.provider == "shm";

  scratch_ = std::make_unique<uint8_t[]>(kScratchBytes);
  Result<DomainMr> scratch = register_memory(scratch_.get(), kScratchBytes, Access::kLocalOnly, MemoryKind::kHost);
  if (!scratch.ok()) return scratch.status();
  scratch_mr_ = *scratch;

  FL_LOG_DEBUG("opened libfabric domain {} on {} ({}), mr_mode=0x{:x}, tx={}, wait_fd={}, delivery_complete={}, hmem={}",
               info_.provider, info_.name, info_.fabric, mr_mode_, info_.max_inflight, wait_fd_,
               info_.delivery_complete, info_.hmem);
  return ok_status();
}

Status LibfabricDomain::open_endpoint() {
  if (ep_) close_fid(&ep_->fid, "ep");
  ep_ = nullptr;
  int ret = fi_endpoint(domain_, fi_.get(), &ep_, nullptr);
  if (ret) return provider_error("fi_endpoint", ret);
  ret = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
  if (ret) return provider_error("fi_ep_bind(cq)", ret);
  ret = fi_ep_bind(ep_, &av_->fid, 0);
  if (ret) return provider_error("fi_ep_bind(av)", ret);
  const char* prov = fi_->fabric_attr->prov_name;
  if (prov && std::strncmp(prov, "efa", 3) == 0) restrict_efa_shortcuts(ep_, (fi_->caps & FI_HMEM) != 0);
  ret = fi_enable(ep_);
  if (ret == -FI_EBUSY) {
    return Status(ErrorCode::kResourceExhausted, provider_error("fi_enable", ret).message() +
                                                     " (for shm: a region with this endpoint's name exists)");
  }
  if (ret) return provider_error("fi_enable", ret);
  return ok_status();
}

LibfabricDomain::~LibfabricDomain() {
  close_fid(ep_ ? &ep_->fid : nullptr, "ep");
  for (auto& [id, mr] : mrs_) close_fid(&mr->fid, "mr");
  for (auto& [id, fd] : dmabuf_fds_) close(fd);
  close_fid(av_ ? &av_->fid : nullptr, "av");
  close_fid(cq_ ? &cq_->fid : nullptr, "cq");
  close_fid(domain_ ? &domain_->fid : nullptr, "domain");
  close_fid(fabric_ ? &fabric_->fid : nullptr, "fabric");
}

Result<DomainMr> LibfabricDomain::register_memory(void* ptr, size_t length, Access access, MemoryKind kind) {
  if (kind != MemoryKind::kHost && kind != MemoryKind::kCuda) {
    return invalid_argument("domain registration takes host or CUDA memory (resolve kAuto first)");
  }
  if (kind == MemoryKind::kCuda && !gpu::kHaveCuda) {
    return unsupported("GPU memory needs a CUDA build of fabric-lib (this one was built with FABRIC_LIB_CUDA=OFF or without nvcc)");
  }
  if (kind == MemoryKind::kCuda && !info_.hmem) {
    return unsupported("provider " + info_.provider + " does not report FI_HMEM: it cannot register GPU memory");
  }
  const uint64_t id = next_mr_id_++;
  iovec iov{ptr, length};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = fi_access_of(access);
  attr.requested_key = (mr_mode_ & FI_MR_PROV_KEY) ? 0 : id;
  attr.iface = FI_HMEM_SYSTEM;
  fid_mr* mr = nullptr;
  if (kind == MemoryKind::kCuda) {
    Result<fid_mr*> registered = register_cuda(ptr, length, attr, id);
    if (!registered.ok()) return registered.status();
    mr = *registered;
  } else {
    int ret = fi_mr_regattr(domain_, &attr, 0, &mr);
    if (ret) return provider_error("fi_mr_regattr", ret);
  }
  int ret = 0;
  if (mr_mode_ & FI_MR_ENDPOINT) {
    ret = fi_mr_bind(mr, &ep_->fid, 0);
    if (ret == 0) ret = fi_mr_enable(mr);
    if (ret) {
      close_fid(&mr->fid, "mr");
      if (auto fd = dmabuf_fds_.find(id); fd != dmabuf_fds_.end()) {
        close(fd->second);
        dmabuf_fds_.erase(fd);
      }
      return provider_error("fi_mr_bind/fi_mr_enable", ret);
    }
  }
  mrs_.emplace(id, mr);
  DomainMr out;
  out.id = id;
  out.desc = fi_mr_desc(mr);
  out.rkey = fi_mr_key(mr);
  out.addr_base = (mr_mode_ & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(ptr) : 0;
  return out;
}

Result<fid_mr*> LibfabricDomain::register_cuda(void* ptr, size_t length, fi_mr_attr& attr, uint64_t id) {
  // Preconditions the provider would report less clearly: device memory, and which device.
  int device = -1;
  Result<MemoryKind> kind = gpu::resolve_memory_kind(ptr, length, MemoryKind::kCuda, &device);
  if (!kind.ok()) return kind.status();
  attr.iface = FI_HMEM_CUDA;
  attr.device.cuda = device;
  fid_mr* mr = nullptr;
  int ret = -FI_ENOSYS;
#if defined(FI_MR_DMABUF)
  // libfabric >= 1.20: register through a dma-buf of the GPU range (the kernel's peer-to-peer
  // path, no nvidia-peermem needed). Any refusal falls back to plain HMEM registration below.
  if (!dmabuf_refused_) {
    Result<gpu::DmabufRange> range = gpu::export_dmabuf(ptr, length, device);
    if (range.ok()) {
      fi_mr_dmabuf dmabuf{};
      dmabuf.fd = range->fd;
      dmabuf.offset = range->offset;
      dmabuf.len = range->length;
      dmabuf.base_addr = range->base;  // registered addresses: base_addr + offset .. (= ptr ..)
      fi_mr_attr dattr = attr;
      dattr.dmabuf = &dmabuf;
      ret = fi_mr_regattr(domain_, &dattr, FI_MR_DMABUF, &mr);
      if (ret == 0) {
        dmabuf_fds_.emplace(id, range->fd);
        return mr;
      }
      close(range->fd);
      FL_LOG_INFO("provider {}: dma-buf registration of GPU memory failed ({}); using plain FI_HMEM_CUDA", info_.provider,
                  fi_strerror(-ret));
    } else {
      FL_LOG_INFO("no dma-buf for GPU memory ({}); using plain FI_HMEM_CUDA", range.status().message());
    }
    dmabuf_refused_ = true;
  }
#endif
  ret = fi_mr_regattr(domain_, &attr, 0, &mr);
  if (ret == 0) return mr;
  if (ret == -FI_ENOSYS || ret == -FI_EOPNOTSUPP || ret == -FI_ENODATA) {
    // e.g. Debian's libfabric: shm reports FI_HMEM, but its CUDA interface was not built in.
    return unsupported("provider " + info_.provider + " reports FI_HMEM but cannot register CUDA memory (" +
                       provider_error("fi_mr_regattr(FI_HMEM_CUDA)", ret).message() +
                       "); this libfabric was probably built without CUDA support");
  }
  return provider_error("fi_mr_regattr(FI_HMEM_CUDA)", ret);
}

void LibfabricDomain::unregister_memory(uint64_t mr_id) {
  auto it = mrs_.find(mr_id);
  if (it == mrs_.end()) return;
  close_fid(&it->second->fid, "mr");
  mrs_.erase(it);
  if (auto fd = dmabuf_fds_.find(mr_id); fd != dmabuf_fds_.end()) {
    close(fd->second);
    dmabuf_fds_.erase(fd);
  }
}

Result<PeerHandle> LibfabricDomain::add_peer(std::span<const uint8_t> address) {
  if (address.empty() || address.size() > kMaxDomainAddressBytes) {
    return malformed("peer address of " + std::to_string(address.size()) + " bytes");
  }
  std::vector<uint8_t> padded(address.size() + kAddressPadding, 0);
  std::memcpy(padded.data(), address.data(), address.size());
  fi_addr_t fi_addr = FI_ADDR_NOTAVAIL;
  int ret = fi_av_insert(av_, padded.data(), 1, &fi_addr, 0, nullptr);
  if (ret != 1 || fi_addr == FI_ADDR_NOTAVAIL) {
    return Status(ErrorCode::kPeerUnreachable,
                  "fi_av_insert rejected a peer address: " + (ret < 0 ? std::string(fi_strerror(-ret)) : "not inserted"));
  }
  return static_cast<PeerHandle>(fi_addr);
}

void LibfabricDomain::remove_peer(PeerHandle peer) {
  if (keep_av_entries_) return;
  fi_addr_t addr = peer;
  int ret = fi_av_remove(av_, &addr, 1, 0);
  if (ret) FL_LOG_DEBUG("fi_av_remove: {}", fi_strerror(-ret));
}

PostResult LibfabricDomain::classify(int ret, OpContext* ctx, const char* call, Status* error) {
  if (ret == 0) return PostResult::kPosted;
  contexts_.release(ctx);
  if (ret == -FI_EAGAIN) return PostResult::kAgain;
  if (error) *error = provider_error(call, ret);
  return PostResult::kFailed;
}

PostResult LibfabricDomain::post_write(const WriteWr& wr, Status* error) {
  OpContext* ctx = contexts_.acquire(EventKind::kWriteDone, wr.context);
  const void* src = wr.src;
  void* desc = wr.src_desc;
  if (wr.length == 0) {
    src = scratch_.get();
    desc = scratch_mr_.desc;
  }
  if (wr.length == 0) {
    // Imm-only: transmit-complete semantics, since there is no payload to deliver (and shm in
    // libfabric 1.17 never completes a zero-length delivery-complete write). The receiver's imm
    // count is what tells anyone that it arrived.
    iovec iov{const_cast<void*>(src), 0};
    fi_rma_iov rma{wr.remote_addr, 0, wr.rkey};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = wr.peer;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = ctx;
    msg.data = wr.imm;
    const uint64_t flags = FI_COMPLETION | FI_TRANSMIT_COMPLETE | (wr.has_imm ? FI_REMOTE_CQ_DATA : 0);
    return classify(static_cast<int>(fi_writemsg(ep_, &msg, flags)), ctx, "fi_writemsg", error);
  }
  // The endpoint's default op_flags (from tx_attr) carry FI_DELIVERY_COMPLETE when granted.
  ssize_t ret = wr.has_imm ? fi_writedata(ep_, src, wr.length, desc, wr.imm, wr.peer, wr.remote_addr, wr.rkey, ctx)
                           : fi_write(ep_, src, wr.length, desc, wr.peer, wr.remote_addr, wr.rkey, ctx);
  return classify(static_cast<int>(ret), ctx, wr.has_imm ? "fi_writedata" : "fi_write", error);
}

PostResult LibfabricDomain::post_send(const SendWr& wr, Status* error) {
  OpContext* ctx = contexts_.acquire(EventKind::kSendDone, wr.context);
  if (wr.length == 0) {  // see post_write: zero-length ops use transmit-complete semantics
    iovec iov{const_cast<void*>(wr.buf), 0};
    void* desc = wr.desc;
    fi_msg msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = wr.peer;
    msg.context = ctx;
    return classify(static_cast<int>(fi_sendmsg(ep_, &msg, FI_COMPLETION | FI_TRANSMIT_COMPLETE)), ctx, "fi_sendmsg",
                    error);
  }
  ssize_t ret = fi_send(ep_, wr.buf, wr.length, wr.desc, wr.peer, ctx);
  return classify(static_cast<int>(ret), ctx, "fi_send", error);
}

PostResult LibfabricDomain::post_recv(const RecvWr& wr, Status* error) {
  OpContext* ctx = contexts_.acquire(EventKind::kRecvDone, wr.context);
  ssize_t ret = fi_recv(ep_, wr.buf, wr.length, wr.desc, FI_ADDR_UNSPEC, ctx);
  return classify(static_cast<int>(ret), ctx, "fi_recv", error);
}

PostResult LibfabricDomain::post_control_send(const SendWr& wr, Status* error) {
  OpContext* ctx = contexts_.acquire(EventKind::kControlSendDone, wr.context);
  ssize_t ret = fi_tsend(ep_, wr.buf, wr.length, wr.desc, wr.peer, detail_control_tag(), ctx);
  return classify(static_cast<int>(ret), ctx, "fi_tsend", error);
}

PostResult LibfabricDomain::post_control_recv(const RecvWr& wr, Status* error) {
  OpContext* ctx = contexts_.acquire(EventKind::kControlRecvDone, wr.context);
  ssize_t ret = fi_trecv(ep_, wr.buf, wr.length, wr.desc, FI_ADDR_UNSPEC, detail_control_tag(), 0, ctx);
  return classify(static_cast<int>(ret), ctx, "fi_trecv", error);
}

void LibfabricDomain::read_error(std::vector<Event>& out) {
  fi_cq_err_entry err{};
  ssize_t ret = fi_cq_readerr(cq_, &err, 0);
  if (ret <= 0) return;
  char buf[256] = {0};
  const char* detail = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof(buf));
  Event ev;
  // Connection-level errors condemn the path to that peer; anything else (e.g. a remote access
  // error for a bad key or range) fails only the operation.
  ev.status = Status(is_connection_error(err.err, err.prov_errno, socket_provider_) ? ErrorCode::kPeerUnreachable : ErrorCode::kProviderError,
                     std::string(fi_strerror(err.err)) + (detail && *detail ? std::string(": ") + detail : ""));
  if (err.op_context) {
    auto* ctx = static_cast<OpContext*>(err.op_context);
    ev.kind = ctx->kind;
    ev.context = ctx->user_context;
    if (!contexts_.release(ctx)) {
      FL_LOG_ERROR("provider {} reported an operation twice (error: {}); ignored", info_.provider, ev.status.message());
      return;
    }
  } else {
    ev.kind = EventKind::kRemoteError;
  }
  out.push_back(std::move(ev));
}

size_t LibfabricDomain::poll(std::vector<Event>& out, size_t max) {
  constexpr size_t kBatch = 32;
  fi_cq_data_entry entries[kBatch];
  const size_t before = out.size();
  while (out.size() - before < max) {
    const size_t want = std::min(kBatch, max - (out.size() - before));
    ssize_t ret = fi_cq_read(cq_, entries, want);
    if (ret == -FI_EAGAIN) break;
    if (ret == -FI_EAVAIL) {
      read_error(out);
      continue;
    }
    if (ret < 0) {
      Event ev;
      ev.kind = EventKind::kRemoteError;
      ev.status = provider_error("fi_cq_read", static_cast<int>(ret));
      out.push_back(std::move(ev));
      break;
    }
    for (ssize_t i = 0; i < ret; ++i) {
      const fi_cq_data_entry& e = entries[i];
      Event ev;
      if ((e.flags & FI_REMOTE_CQ_DATA) && (e.flags & FI_REMOTE_WRITE)) {
        ev.kind = EventKind::kImm;
        ev.imm = static_cast<uint32_t>(e.data);
      } else if (e.op_context) {
        auto* ctx = static_cast<OpContext*>(e.op_context);
        ev.kind = ctx->kind;
        ev.context = ctx->user_context;
        ev.length = e.len;
        if (!contexts_.release(ctx)) {
          FL_LOG_ERROR("provider {} reported an operation twice; ignored", info_.provider);
          continue;
        }
      } else {
        continue;  // an event we did not ask for (e.g. a remote write without data)
      }
      out.push_back(std::move(ev));
    }
    if (static_cast<size_t>(ret) < want) break;
  }
  return out.size() - before;
}

bool LibfabricDomain::ready_to_block() {
  if (wait_fd_ < 0) return false;
  fid* fids[1] = {&cq_->fid};
  return fi_trywait(fabric_, fids, 1) == FI_SUCCESS;
}

}  // namespace fabric_lib::transport::libfabric
