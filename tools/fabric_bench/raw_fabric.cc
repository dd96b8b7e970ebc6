#include "fabric_bench/raw_fabric.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "fabric_lib/domain_address.h"

namespace fabric_lib::bench {
namespace {

constexpr uint32_t kFiVersion = FI_VERSION(1, 17);
constexpr uint64_t kMrModes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
constexpr size_t kCqBatch = 32;
// Passes of the run loop without any progress before it yields the CPU once (tens of
// microseconds of polling, like the engine worker's spin budget before it waits).
constexpr uint32_t kIdlePassesBeforeYield = 256;

Status fi_error(const char* call, long ret) {
  return Status(ErrorCode::kProviderError,
                std::string(call) + ": " + fi_strerror(static_cast<int>(ret < 0 ? -ret : ret)));
}

struct InfoDeleter {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// The engine's hints (src/transport/libfabric/fabric_info.cc), so both sides get the same
// provider behaviour: RDM endpoint, MSG + RMA, delivery-complete writes when granted.
InfoPtr getinfo(const std::string& provider, bool delivery_complete) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) return nullptr;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SEND | FI_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = static_cast<int>(kMrModes);
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  if (delivery_complete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  fi_info* list = nullptr;
  if (fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints.get(), &list) != 0) return nullptr;
  return InfoPtr(list);
}

bool matches(const fi_info* info, const std::string& name) {
  if (info->domain_attr->cq_data_size < 4 || info->domain_attr->mr_key_size > 8) return false;
  if (name.empty()) return true;
  const char* domain = info->domain_attr->name;
  const char* fabric = info->fabric_attr->name;
  return (domain && name == domain) || (fabric && name == fabric);
}

void close_fid(fid_t f) {
  if (f) fi_close(f);
}

}  // namespace

// One domain of the baseline: the same objects the engine opens per domain.
struct RawFabric::Endpoint {
  // The first member, so a completion's op_context leads back to the WR's bookkeeping.
  struct WrContext {
    fi_context2 fi;
    uint32_t slot = 0;
  };

  InfoPtr info;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  void* mr_desc = nullptr;
  uint64_t mr_mode = 0;
  size_t tx_size = 0;
  std::vector<uint8_t> address;
  fi_addr_t peer = FI_ADDR_NOTAVAIL;
  uint64_t remote_key = 0;
  uint64_t remote_base = 0;
  std::vector<WrContext> contexts;
  std::vector<uint32_t> free_contexts;

  ~Endpoint() {
    close_fid(ep ? &ep->fid : nullptr);
    close_fid(mr ? &mr->fid : nullptr);
    close_fid(av ? &av->fid : nullptr);
    close_fid(cq ? &cq->fid : nullptr);
    close_fid(domain ? &domain->fid : nullptr);
    close_fid(fabric ? &fabric->fid : nullptr);
  }

  Status open(const std::string& provider, const std::string& interface_name) {
    if (provider.rfind("efa", 0) == 0) setenv("FI_EFA_ENABLE_SHM_TRANSFER", "0", 0);  // as the engine
    InfoPtr list = getinfo(provider, true);
    if (!list) list = getinfo(provider, false);
    if (!list) return Status(ErrorCode::kUnsupported, "raw baseline: provider '" + provider + "' offers no RDM+RMA endpoint");
    // With no name, take what the engine takes by default: the first domain that is not
    // loopback, else loopback.
    for (int pass = 0; pass < 2 && !info; ++pass) {
      for (fi_info* i = list.get(); i; i = i->next) {
        const bool loopback = i->domain_attr->name && std::string(i->domain_attr->name) == "lo";
        if (matches(i, interface_name) && (pass == 1 || !interface_name.empty() || !loopback)) {
          info.reset(fi_dupinfo(i));
          break;
        }
      }
    }
    if (!info) return not_found("raw baseline: provider '" + provider + "' has no domain named '" + interface_name + "'");
    mr_mode = static_cast<uint64_t>(info->domain_attr->mr_mode);
    tx_size = info->tx_attr->size > 0 ? info->tx_attr->size : 256;
    if (int r = fi_fabric(info->fabric_attr, &fabric, nullptr)) return fi_error("fi_fabric", r);
    if (int r = fi_domain(fabric, info.get(), &domain, nullptr)) return fi_error("fi_domain", r);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.size = 16384;
    cq_attr.wait_obj = FI_WAIT_NONE;
    if (int r = fi_cq_open(domain, &cq_attr, &cq, nullptr)) return fi_error("fi_cq_open", r);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    if (int r = fi_av_open(domain, &av_attr, &av, nullptr)) return fi_error("fi_av_open", r);
    if (int r = fi_endpoint(domain, info.get(), &ep, nullptr)) return fi_error("fi_endpoint", r);
    if (int r = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) return fi_error("fi_ep_bind(cq)", r);
    if (int r = fi_ep_bind(ep, &av->fid, 0)) return fi_error("fi_ep_bind(av)", r);
    if (int r = fi_enable(ep)) return fi_error("fi_enable", r);
    size_t len = 256;
    address.resize(len);
    if (int r = fi_getname(&ep->fid, address.data(), &len)) return fi_error("fi_getname", r);
    address.resize(len);
    contexts.resize(tx_size);
    for (uint32_t i = 0; i < tx_size; ++i) free_contexts.push_back(static_cast<uint32_t>(tx_size - 1 - i));
    return ok_status();
  }

  Result<RawRemoteDomain> register_region(void* ptr, size_t length, bool remote_write, uint64_t key) {
    if (mr) {
      close_fid(&mr->fid);
      mr = nullptr;
    }
    iovec iov{ptr, length};
    fi_mr_attr attr{};
    attr.mr_iov = &iov;
    attr.iov_count = 1;
    attr.access = FI_WRITE | FI_READ | FI_SEND | FI_RECV | (remote_write ? FI_REMOTE_WRITE : 0);
    attr.requested_key = (mr_mode & FI_MR_PROV_KEY) ? 0 : key;
    attr.iface = FI_HMEM_SYSTEM;
    if (int r = fi_mr_regattr(domain, &attr, 0, &mr)) return fi_error("fi_mr_regattr", r);
    if (mr_mode & FI_MR_ENDPOINT) {
      int r = fi_mr_bind(mr, &ep->fid, 0);
      if (r == 0) r = fi_mr_enable(mr);
      if (r) return fi_error("fi_mr_bind/enable", r);
    }
    mr_desc = fi_mr_desc(mr);
    RawRemoteDomain out;
    out.address = address;
    out.key = fi_mr_key(mr);
    out.base = (mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(ptr) : 0;
    return out;
  }

  // The context of a completion of our own WR, or null for anything else (an arriving imm: some
  // providers leave op_context unset there, others garbage).
  WrContext* own_context(const fi_cq_data_entry& e) {
    if (e.flags & FI_REMOTE_CQ_DATA) return nullptr;
    auto* ctx = reinterpret_cast<WrContext*>(e.op_context);
    if (!ctx || ctx < contexts.data() || ctx >= contexts.data() + contexts.size()) return nullptr;
    return ctx;
  }

  Status error_entry() {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(cq, &err, 0) <= 0) return fi_error("fi_cq_read", -FI_EAVAIL);
    char buf[256] = {0};
    const char* detail = fi_cq_strerror(cq, err.prov_errno, err.err_data, buf, sizeof(buf));
    return Status(ErrorCode::kProviderError,
                  std::string("raw completion error: ") + fi_strerror(err.err) + (detail ? std::string(": ") + detail : ""));
  }
};

std::string encode_raw_region(const RawRemoteRegion& region) {
  std::string out;
  for (const RawRemoteDomain& d : region) {
    if (!out.empty()) out += ',';
    out += to_hex(d.address) + ':' + std::to_string(d.key) + ':' + std::to_string(d.base);
  }
  return out;
}

Result<RawRemoteRegion> decode_raw_region(std::string_view text) {
  RawRemoteRegion region;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view entry = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t c1 = entry.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : entry.find(':', c1 + 1);
    if (c2 == std::string_view::npos) return malformed("raw region entry without key and base");
    Result<std::vector<uint8_t>> address = from_hex(entry.substr(0, c1));
    if (!address.ok()) return address.status();
    RawRemoteDomain d;
    d.address = std::move(address).value();
    try {
      d.key = std::stoull(std::string(entry.substr(c1 + 1, c2 - c1 - 1)));
      d.base = std::stoull(std::string(entry.substr(c2 + 1)));
    } catch (...) {
      return malformed("raw region entry with a bad key or base");
    }
    region.push_back(std::move(d));
  }
  if (region.empty()) return malformed("empty raw region");
  return region;
}

Result<std::unique_ptr<RawFabric>> RawFabric::open(const std::string& provider, const std::string& interface_name,
                                                   size_t domains) {
  std::unique_ptr<RawFabric> raw(new RawFabric());
  for (size_t d = 0; d < domains; ++d) {
    auto ep = std::make_unique<Endpoint>();
    FABRIC_LIB_RETURN_IF_ERROR(ep->open(provider, interface_name));
    raw->endpoints_.push_back(std::move(ep));
  }
  return raw;
}

RawFabric::~RawFabric() = default;

std::string RawFabric::provider_name() const {
  const fi_info* info = endpoints_.empty() ? nullptr : endpoints_[0]->info.get();
  return info && info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "";
}

Result<RawRemoteRegion> RawFabric::register_region(void* ptr, size_t length, bool remote_write) {
  RawRemoteRegion region;
  for (size_t d = 0; d < endpoints_.size(); ++d) {
    Result<RawRemoteDomain> r = endpoints_[d]->register_region(ptr, length, remote_write, 0x5a000 + d);
    if (!r.ok()) return r.status();
    region.push_back(std::move(r).value());
  }
  local_base_ = static_cast<uint8_t*>(ptr);
  return region;
}

Status RawFabric::connect(const RawRemoteRegion& remote) {
  if (remote.size() != endpoints_.size()) {
    return invalid_argument("raw baseline: the target has " + std::to_string(remote.size()) + " domains, we have " +
                            std::to_string(endpoints_.size()));
  }
  for (size_t d = 0; d < endpoints_.size(); ++d) {
    Endpoint& ep = *endpoints_[d];
    if (ep.peer != FI_ADDR_NOTAVAIL) fi_av_remove(ep.av, &ep.peer, 1, 0);
    // Providers parse addresses as sockaddrs or strings: give them zero padding, like the engine.
    std::vector<uint8_t> padded(remote[d].address.size() + 64, 0);
    std::memcpy(padded.data(), remote[d].address.data(), remote[d].address.size());
    ep.peer = FI_ADDR_NOTAVAIL;
    if (fi_av_insert(ep.av, padded.data(), 1, &ep.peer, 0, nullptr) != 1 || ep.peer == FI_ADDR_NOTAVAIL) {
      return Status(ErrorCode::kPeerUnreachable, "raw baseline: fi_av_insert rejected the target's address");
    }
    ep.remote_key = remote[d].key;
    ep.remote_base = remote[d].base;
  }
  return ok_status();
}

Result<RawRunResult> RawFabric::run(const RawPlanFn& plan, uint64_t max_requests,
                                    std::chrono::duration<double> duration, size_t window, uint32_t imm) {
  using Clock = std::chrono::steady_clock;
  if (!local_base_) return invalid_argument("raw baseline: no local region registered");
  window = std::max<size_t>(window, 1);
  const size_t domains = endpoints_.size();

  struct Slot {
    uint64_t wrs_left = 0;
    uint64_t bytes = 0;
  };
  struct Pending {
    uint32_t slot;
    RawWr wr;
  };
  std::vector<Slot> slots(window);
  std::vector<uint32_t> free_slots;
  for (size_t i = window; i-- > 0;) free_slots.push_back(static_cast<uint32_t>(i));
  std::vector<std::deque<Pending>> pending(domains);
  std::vector<size_t> inflight(domains, 0);
  std::vector<RawWr> wrs;
  fi_cq_data_entry entries[kCqBatch];

  RawRunResult result;
  uint64_t admitted = 0;
  size_t requests_inflight = 0;
  const auto start = Clock::now();
  const auto deadline = duration.count() > 0 ? start + std::chrono::duration_cast<Clock::duration>(duration)
                                             : Clock::time_point::max();
  bool admitting = true;
  uint32_t idle_passes = 0;
  while (admitting || requests_inflight > 0) {
    bool progress = false;
    // Admit new requests up to the window.
    while (admitting && requests_inflight < window) {
      if ((max_requests && admitted >= max_requests) || Clock::now() >= deadline) {
        admitting = false;
        break;
      }
      wrs.clear();
      plan(admitted, wrs);
      const uint32_t s = free_slots.back();
      free_slots.pop_back();
      slots[s] = {wrs.size(), 0};
      for (const RawWr& w : wrs) {
        if (w.domain >= domains) return invalid_argument("raw baseline: WR names domain " + std::to_string(w.domain));
        slots[s].bytes += w.length;
        pending[w.domain].push_back({s, w});
      }
      ++admitted;
      ++requests_inflight;
    }
    // Post what the endpoints accept.
    for (size_t d = 0; d < domains; ++d) {
      Endpoint& ep = *endpoints_[d];
      while (!pending[d].empty() && !ep.free_contexts.empty()) {
        const Pending& p = pending[d].front();
        const uint32_t c = ep.free_contexts.back();
        ep.contexts[c].slot = p.slot;
        const ssize_t ret = fi_writedata(ep.ep, local_base_ + p.wr.src_offset, p.wr.length, ep.mr_desc, imm, ep.peer,
                                         ep.remote_base + p.wr.dst_offset, ep.remote_key, &ep.contexts[c].fi);
        if (ret == -FI_EAGAIN) break;
        if (ret != 0) return fi_error("fi_writedata", ret);
        ep.free_contexts.pop_back();
        ++inflight[d];
        pending[d].pop_front();
        progress = true;
      }
    }
    // Reap completions.
    for (size_t d = 0; d < domains; ++d) {
      Endpoint& ep = *endpoints_[d];
      const ssize_t n = fi_cq_read(ep.cq, entries, kCqBatch);
      if (n == -FI_EAGAIN) continue;
      if (n == -FI_EAVAIL) return ep.error_entry();
      if (n < 0) return fi_error("fi_cq_read", n);
      progress = true;
      for (ssize_t i = 0; i < n; ++i) {
        auto* ctx = reinterpret_cast<Endpoint::WrContext*>(entries[i].op_context);
        if (!ctx) continue;
        ep.free_contexts.push_back(static_cast<uint32_t>(ctx - ep.contexts.data()));
        --inflight[d];
        ++result.wrs;
        Slot& slot = slots[ctx->slot];
        if (--slot.wrs_left == 0) {
          ++result.requests;
          result.bytes += slot.bytes;
          free_slots.push_back(ctx->slot);
          --requests_inflight;
        }
      }
    }
    // A long stretch without progress: let the peer's thread run if it shares our core (a no-op
    // on an idle core). Not sooner: a provider moves data inside fi_cq_read calls that report
    // nothing, and yielding to a busy machine costs a time slice.
    idle_passes = progress ? 0 : idle_passes + 1;
    if (idle_passes >= kIdlePassesBeforeYield) {
      sched_yield();
      idle_passes = 0;
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

Result<size_t> RawFabric::poll_target(RawImmCounts& counts) {
  fi_cq_data_entry entries[kCqBatch];
  size_t total = 0;
  for (auto& ep : endpoints_) {
    const ssize_t n = fi_cq_read(ep->cq, entries, kCqBatch);
    if (n == -FI_EAGAIN) continue;
    if (n == -FI_EAVAIL) return ep->error_entry();
    if (n < 0) return fi_error("fi_cq_read", n);
    for (ssize_t i = 0; i < n; ++i) {
      if (entries[i].flags & FI_REMOTE_CQ_DATA) counts[entries[i].data & 0xff].fetch_add(1, std::memory_order_relaxed);
      if (Endpoint::WrContext* ctx = ep->own_context(entries[i])) {  // one of our own post_imm writes
        ep->free_contexts.push_back(static_cast<uint32_t>(ctx - ep->contexts.data()));
      }
    }
    total += static_cast<size_t>(n);
  }
  return total;
}

Status RawFabric::post_imm(uint32_t imm) {
  if (!local_base_ || endpoints_.empty()) return invalid_argument("raw imm: no local region registered");
  Endpoint& ep = *endpoints_[0];
  if (ep.peer == FI_ADDR_NOTAVAIL) return Status(ErrorCode::kFailedPrecondition, "raw imm: not connected");
  for (;;) {
    if (ep.free_contexts.empty()) {
      RawImmCounts ignored{};
      Result<size_t> n = poll_target(ignored);  // completions of earlier imms free contexts
      if (!n.ok()) return n.status();
      continue;
    }
    const uint32_t c = ep.free_contexts.back();
    // As the engine posts imm-only writes: transmit-complete (shm in libfabric 1.17 never completes
    // a zero-length delivery-complete write; the receiver's count is the delivery signal).
    iovec iov{local_base_, 0};
    fi_rma_iov rma{ep.remote_base, 0, ep.remote_key};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &ep.mr_desc;
    msg.iov_count = 1;
    msg.addr = ep.peer;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &ep.contexts[c].fi;
    msg.data = imm;
    const ssize_t r = fi_writemsg(ep.ep, &msg, FI_COMPLETION | FI_TRANSMIT_COMPLETE | FI_REMOTE_CQ_DATA);
    if (r == 0) {
      ep.free_contexts.pop_back();
      return ok_status();
    }
    if (r != -FI_EAGAIN) return fi_error("fi_writemsg(imm)", r);
    RawImmCounts ignored{};
    Result<size_t> n = poll_target(ignored);
    if (!n.ok()) return n.status();
  }
}

Result<std::vector<double>> RawFabric::post_call_times(uint64_t bytes, size_t iterations, uint32_t imm,
                                                       std::chrono::seconds timeout) {
  using Clock = std::chrono::steady_clock;
  if (!local_base_ || endpoints_.empty()) return invalid_argument("raw post: no local region registered");
  Endpoint& ep = *endpoints_[0];
  if (ep.peer == FI_ADDR_NOTAVAIL) return Status(ErrorCode::kFailedPrecondition, "raw post: not connected");
  if (ep.free_contexts.empty()) return internal_error("raw post: no free context");
  auto ignored = std::make_unique<RawImmCounts>();
  std::vector<double> call_us;
  call_us.reserve(iterations);
  for (size_t i = 0; i < iterations; ++i) {
    const uint32_t c = ep.free_contexts.back();
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto t0 = Clock::now();
      const ssize_t r = fi_writedata(ep.ep, local_base_, bytes, ep.mr_desc, imm, ep.peer, ep.remote_base,
                                     ep.remote_key, &ep.contexts[c].fi);
      const auto t1 = Clock::now();
      if (r == 0) {
        call_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        ep.free_contexts.pop_back();
        break;
      }
      if (r != -FI_EAGAIN) return fi_error("fi_writedata", r);
      Result<size_t> n = poll_target(*ignored);  // progress, then try again
      if (!n.ok()) return n.status();
      if (Clock::now() > deadline) return Status(ErrorCode::kDeadlineExceeded, "raw post: the provider never took the write");
    }
    // Its completion gives the context back.
    while (std::find(ep.free_contexts.begin(), ep.free_contexts.end(), c) == ep.free_contexts.end()) {
      Result<size_t> n = poll_target(*ignored);
      if (!n.ok()) return n.status();
      if (Clock::now() > deadline) return Status(ErrorCode::kDeadlineExceeded, "raw post: write " + std::to_string(i) + " never completed");
    }
  }
  return call_us;
}

Result<std::vector<double>> RawFabric::round_trip(uint32_t ping, uint32_t pong, size_t iterations,
                                                  std::chrono::seconds timeout) {
  using Clock = std::chrono::steady_clock;
  auto counts = std::make_unique<RawImmCounts>();
  for (auto& c : *counts) c.store(0);
  std::vector<double> rtt_us;
  rtt_us.reserve(iterations);
  for (size_t i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    FABRIC_LIB_RETURN_IF_ERROR(post_imm(ping));
    while ((*counts)[pong & 0xff].load(std::memory_order_relaxed) < i + 1) {
      Result<size_t> n = poll_target(*counts);
      if (!n.ok()) return n.status();
      if (Clock::now() - t0 > timeout) {
        return Status(ErrorCode::kDeadlineExceeded, "raw imm round trip " + std::to_string(i) + " never came back");
      }
    }
    rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return rtt_us;
}

// --- the scatter baseline -----------------------------------------------------------------------

Result<std::vector<double>> RawFabric::scatter(const std::vector<RawRemoteRegion>& peers, uint64_t bytes,
                                               size_t iterations, uint32_t imm, std::vector<double>* complete_us) {
  using Clock = std::chrono::steady_clock;
  if (!local_base_) return invalid_argument("raw scatter: no local region registered");
  const size_t domains = endpoints_.size();
  struct Target {
    size_t domain;
    fi_addr_t addr;
    uint64_t key;
    uint64_t base;
  };
  std::vector<Target> targets;
  for (size_t t = 0; t < peers.size(); ++t) {
    const size_t d = t % domains;
    if (peers[t].size() != domains) return invalid_argument("raw scatter: a peer of another domain count");
    Endpoint& ep = *endpoints_[d];
    std::vector<uint8_t> padded(peers[t][d].address.size() + 64, 0);
    std::memcpy(padded.data(), peers[t][d].address.data(), peers[t][d].address.size());
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    if (fi_av_insert(ep.av, padded.data(), 1, &addr, 0, nullptr) != 1 || addr == FI_ADDR_NOTAVAIL) {
      return Status(ErrorCode::kPeerUnreachable, "raw scatter: fi_av_insert rejected peer " + std::to_string(t));
    }
    targets.push_back({d, addr, peers[t][d].key, peers[t][d].base});
  }
  std::vector<double> post_us;
  post_us.reserve(iterations);
  fi_cq_data_entry entries[kCqBatch];
  for (size_t it = 0; it < iterations; ++it) {
    const auto t0 = Clock::now();
    Clock::time_point last_post = t0;
    size_t outstanding = 0;
    size_t next = 0;
    while (next < targets.size() || outstanding > 0) {
      while (next < targets.size()) {
        const Target& t = targets[next];
        Endpoint& ep = *endpoints_[t.domain];
        if (ep.free_contexts.empty()) break;
        const uint32_t c = ep.free_contexts.back();
        const ssize_t r = fi_writedata(ep.ep, local_base_ + next * bytes, bytes, ep.mr_desc, imm, t.addr, t.base,
                                       t.key, &ep.contexts[c].fi);
        if (r == -FI_EAGAIN) break;
        if (r != 0) return fi_error("fi_writedata", r);
        ep.free_contexts.pop_back();
        ++outstanding;
        ++next;
        if (next == targets.size()) last_post = Clock::now();
      }
      for (auto& ep : endpoints_) {
        const ssize_t n = fi_cq_read(ep->cq, entries, kCqBatch);
        if (n == -FI_EAGAIN) continue;
        if (n == -FI_EAVAIL) return ep->error_entry();
        if (n < 0) return fi_error("fi_cq_read", n);
        for (ssize_t i = 0; i < n; ++i) {
          Endpoint::WrContext* ctx = ep->own_context(entries[i]);
          if (!ctx) continue;  // an imm arriving here, not one of our writes
          ep->free_contexts.push_back(static_cast<uint32_t>(ctx - ep->contexts.data()));
          --outstanding;
        }
      }
    }
    post_us.push_back(std::chrono::duration<double, std::micro>(last_post - t0).count());
    if (complete_us) complete_us->push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  for (const Target& t : targets) fi_av_remove(endpoints_[t.domain]->av, const_cast<fi_addr_t*>(&t.addr), 1, 0);
  return post_us;
}

}  // namespace fabric_lib::bench
