#include "transport/reorder/reordering_domain.h"

#include <algorithm>

namespace fabric_lib::transport {

ReorderingDomain::ReorderingDomain(std::unique_ptr<Domain> inner, uint64_t seed)
    : inner_(std::move(inner)), rng_(seed) {}

PostResult ReorderingDomain::post_write(const WriteWr& wr, Status* /*error*/) {
  held_posts_.emplace_back(wr);
  if (held_posts_.size() >= kWindow) flush_posts();
  return PostResult::kPosted;
}

PostResult ReorderingDomain::post_send(const SendWr& wr, Status* /*error*/) {
  held_posts_.emplace_back(wr);
  if (held_posts_.size() >= kWindow) flush_posts();
  return PostResult::kPosted;
}

void ReorderingDomain::flush_posts() {
  std::shuffle(held_posts_.begin(), held_posts_.end(), rng_);
  if (held_posts_.size() >= 2) counters_->unordered_windows_shuffled.fetch_add(1, std::memory_order_relaxed);
  size_t kept = 0;
  for (size_t i = 0; i < held_posts_.size(); ++i) {
    auto& wr = held_posts_[i];
    Status error;
    PostResult r = std::holds_alternative<WriteWr>(wr) ? inner_->post_write(std::get<WriteWr>(wr), &error)
                                                       : inner_->post_send(std::get<SendWr>(wr), &error);
    if (r == PostResult::kAgain) {
      held_posts_[kept++] = wr;  // try again at the next poll
    } else if (r == PostResult::kFailed) {
      // We promised an event when we accepted the WR: report the failure as its completion.
      Event ev;
      ev.kind = std::holds_alternative<WriteWr>(wr) ? EventKind::kWriteDone : EventKind::kSendDone;
      ev.context = std::holds_alternative<WriteWr>(wr) ? std::get<WriteWr>(wr).context : std::get<SendWr>(wr).context;
      ev.status = error;
      held_events_.push_back({std::move(ev), 1});
    }
  }
  held_posts_.resize(kept);
}

void ReorderingDomain::remove_peer(PeerHandle peer) {
  size_t kept = 0;
  for (size_t i = 0; i < held_posts_.size(); ++i) {
    auto& wr = held_posts_[i];
    const bool is_write = std::holds_alternative<WriteWr>(wr);
    const PeerHandle target = is_write ? std::get<WriteWr>(wr).peer : std::get<SendWr>(wr).peer;
    if (target != peer) {
      held_posts_[kept++] = wr;
      continue;
    }
    Event ev;
    ev.kind = is_write ? EventKind::kWriteDone : EventKind::kSendDone;
    ev.context = is_write ? std::get<WriteWr>(wr).context : std::get<SendWr>(wr).context;
    ev.status = Status(ErrorCode::kPeerUnreachable, "peer removed before the WR was posted");
    held_events_.push_back({std::move(ev), 1});
  }
  held_posts_.resize(kept);
  inner_->remove_peer(peer);
}

size_t ReorderingDomain::poll(std::vector<Event>& out, size_t max) {
  if (!held_posts_.empty()) flush_posts();
  const size_t before = out.size();
  // Release held events whose time has come, in shuffled order.
  std::shuffle(held_events_.begin(), held_events_.end(), rng_);
  size_t kept = 0;
  for (size_t i = 0; i < held_events_.size(); ++i) {
    HeldEvent& h = held_events_[i];
    if (--h.polls_left == 0 && out.size() - before < max) {
      out.push_back(std::move(h.event));
    } else {
      if (h.polls_left == 0) h.polls_left = 1;
      held_events_[kept++] = std::move(h);
    }
  }
  held_events_.resize(kept);
  if (out.size() - before >= max) return out.size() - before;

  scratch_.clear();
  inner_->poll(scratch_, max - (out.size() - before));
  std::uniform_int_distribution<unsigned> hold(0, kHoldOneIn - 1);
  std::uniform_int_distribution<unsigned> polls(1, kMaxHoldPolls);
  for (Event& ev : scratch_) {
    if (hold(rng_) == 0) {
      counters_->unordered_events_held.fetch_add(1, std::memory_order_relaxed);
      held_events_.push_back({std::move(ev), polls(rng_)});
    } else {
      out.push_back(std::move(ev));
    }
  }
  return out.size() - before;
}

}  // namespace fabric_lib::transport
