// GroupWorker: the liveness probe (TransferEngineBuilder::liveness_probe). Every engine answers
// pings on every domain that supports control messages; an engine with the probe enabled pings
// each path that has WRs in flight (to tell a slow path from a dead one) and each failed path
// (to notice it recover), once per interval. `misses` unanswered pings in a row fail a path; an
// answer counts as progress for stall detection and brings a failed path back up.
#include <cstring>
#include <utility>

#include "core/group_worker.h"
#include "base/log.h"
#include "core/probe_message.h"

namespace fabric_lib::detail {
namespace {

constexpr uint32_t kControlRecvSlots = 16;
constexpr uint32_t kControlSendSlots = 16;
constexpr size_t kControlSlotBytes = 1024;
static_assert(kMaxProbeMessageBytes <= kControlSlotBytes);
// A failed path is pinged this many times at most before the probe gives up on it (a new
// request to the peer, or forget_peer(), starts over).
constexpr uint32_t kMaxRecoveryProbes = 600;

uint64_t control_context(size_t d, uint32_t slot) { return (uint64_t{d} << 32) | slot; }
uint32_t slot_of(uint64_t context) { return static_cast<uint32_t>(context); }

}  // namespace

Status GroupWorker::open_control() {
  bool all = true;
  for (DomainState& ds : domains_) all = all && ds.domain->supports_control();
  if (!all) {
    if (config_.probe_interval_ns > 0) {
      return unsupported("liveness_probe needs control messages (FI_TAGGED), which provider " + infos_[0].provider +
                         " does not offer");
    }
    return ok_status();  // no probe either way; nothing to answer with
  }
  control_.resize(domains_.size());
  for (size_t d = 0; d < domains_.size(); ++d) {
    Result<BufferBlock> block =
        BufferBlock::allocate(*domains_[d].domain, kControlRecvSlots + kControlSendSlots, kControlSlotBytes);
    if (!block.ok()) return block.status();
    control_[d].block = std::move(block).value();
    control_[d].slot_peer.assign(kControlRecvSlots + kControlSendSlots, nullptr);
    for (uint32_t s = 0; s < kControlSendSlots; ++s) control_[d].free_sends.push_back(kControlRecvSlots + s);
    for (uint32_t s = 0; s < kControlRecvSlots; ++s) {
      const BufferBlock& b = control_[d].block;
      Status error;
      if (domains_[d].domain->post_control_recv({b.slot(s), b.slot_bytes, b.mr.desc, control_context(d, s)}, &error) !=
          transport::PostResult::kPosted) {
        return Status(error.ok() ? ErrorCode::kResourceExhausted : error.code(),
                      "posting control receives: " + error.message());
      }
    }
  }
  return ok_status();
}

bool GroupWorker::send_probe(size_t d, PeerEntry& peer, const ProbeMessage& message) {
  ControlBuffers& c = control_[d];
  if (c.free_sends.empty()) return false;
  Result<transport::PeerHandle> handle = peers_.handle(peer, d, *domains_[d].domain);
  if (!handle.ok()) return false;
  const uint32_t slot = c.free_sends.back();
  const std::vector<uint8_t> bytes = message.encode();
  std::memcpy(c.block.slot(slot), bytes.data(), bytes.size());
  Status error;
  const transport::PostResult r = domains_[d].domain->post_control_send(
      {c.block.slot(slot), bytes.size(), c.block.mr.desc, *handle, control_context(d, slot)}, &error);
  if (r != transport::PostResult::kPosted) return false;
  c.free_sends.pop_back();
  c.slot_peer[slot] = &peer;
  peers_.op_posted(peer, d);
  return true;
}

void GroupWorker::on_control_send_done(size_t d, uint64_t context) {
  if (d >= control_.size()) return;
  const uint32_t slot = slot_of(context);
  if (PeerEntry* peer = std::exchange(control_[d].slot_peer[slot], nullptr)) peers_.op_done(*peer, d, *domains_[d].domain);
  control_[d].free_sends.push_back(slot);
}

void GroupWorker::on_control_recv(size_t d, uint64_t context, const transport::Event& ev) {
  ControlBuffers& c = control_[d];
  const uint32_t slot = slot_of(context);
  if (ev.status.ok()) {
    Result<ProbeMessage> m = ProbeMessage::decode(std::span<const uint8_t>(c.block.slot(slot), std::min<uint64_t>(ev.length, c.block.slot_bytes)));
    if (!m.ok()) {
      FL_LOG_WARN("group {} domain {}: dropped a malformed control message: {}", config_.group, d, m.status().message());
    } else if (m->domain != d) {
      FL_LOG_WARN("group {} domain {}: control message for domain {} dropped", config_.group, d, m->domain);
    } else if (m->type == ProbeMessage::Type::kPing) {
      // Answer on the same path; the sender may be a peer we never wrote to.
      PeerEntry& peer = peers_.for_main_address(m->key);
      peers_.set_address(peer, d, m->address, *domains_[d].domain);
      ProbeMessage pong{ProbeMessage::Type::kPong, static_cast<uint16_t>(d), m->seq, addresses_[0], addresses_[d]};
      send_probe(d, peer, pong);
    } else if (PeerEntry* peer = peers_.find(m->key); peer && peer->paths[d].probe_seq == m->seq) {
      Path& path = peer->paths[d];
      path.probe_seq = 0;
      path.probe_misses = 0;
      path.last_progress_ns = monotonic_ns();  // alive: not a stall, however slow its WRs are
      if (!path.up) path_recovered(*peer, d);
    }
  }
  Status error;
  domains_[d].domain->post_control_recv({c.block.slot(slot), c.block.slot_bytes, c.block.mr.desc, context}, &error);
}

bool GroupWorker::probe_sweep(int64_t now) {
  if (config_.probe_interval_ns <= 0 || control_.empty() || now < next_probe_ns_) return false;
  next_probe_ns_ = now + config_.probe_interval_ns;
  bool any = false;
  peers_.for_each([&](PeerEntry& peer) {
    for (size_t d = 0; d < peer.paths.size(); ++d) {
      Path& path = peer.paths[d];
      const bool watch = path.up ? (path.inflight > 0 || path.blocked_since_ns != 0)
                                 : (!path.address.empty() && path.recovery_probes < kMaxRecoveryProbes);
      if (!watch) {
        path.probe_seq = 0;
        path.probe_misses = 0;
        continue;
      }
      if (path.probe_seq != 0 && ++path.probe_misses >= config_.probe_misses && path.up) {
        metrics_.events().probe_failures.add();
        path_failed(peer, d, Status(ErrorCode::kPeerUnreachable, std::to_string(path.probe_misses) + " pings unanswered"));
        any = true;
        continue;
      }
      // A ping that cannot even be sent counts as unanswered at the next sweep.
      ProbeMessage ping{ProbeMessage::Type::kPing, static_cast<uint16_t>(d), next_probe_seq_, addresses_[0], addresses_[d]};
      path.probe_seq = next_probe_seq_++;
      if (!path.up) ++path.recovery_probes;
      any |= send_probe(d, peer, ping);
    }
  });
  return any;
}

}  // namespace fabric_lib::detail
