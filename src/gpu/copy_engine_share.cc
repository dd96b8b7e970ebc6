#include "gpu/copy_engine_share.h"

#include <chrono>
#include <thread>

namespace fabric_lib::gpu {

class CopyEngineShare::Client final : public CopyEngine {
 public:
  Client(std::shared_ptr<CopyEngineShare> share, uint64_t index) : share_(std::move(share)), index_(index) {}
  ~Client() override { drain(); }

  CopySubmit submit(const CopyRequest& request, Status* error) override {
    if (request.op > kOpMask) {
      if (error) *error = invalid_argument("shared copy engine: op id past 48 bits");
      return CopySubmit::kFailed;
    }
    CopyRequest tagged = request;
    tagged.op = (index_ << kOpBits) | request.op;
    const CopySubmit r = share_->engine_->submit(tagged, error);
    if (r == CopySubmit::kAccepted) {
      ++share_->inflight_[index_];
      ++share_->submits_since_pump_;
    }
    return r;
  }

  std::span<CopySegment> segment_room(size_t n) override { return share_->engine_->segment_room(n); }
  std::span<CopyPagePair> page_room(size_t n) override { return share_->engine_->page_room(n); }

  void progress(std::vector<CopyDone>& done) override {
    if (share_->must_pump_for(index_)) share_->pump();
    share_->pumps_seen_[index_] = share_->pumps_;
    std::vector<CopyDone>& mine = share_->done_[index_];
    for (CopyDone& d : mine) done.push_back(std::move(d));
    share_->inflight_[index_] -= mine.size();
    mine.clear();
  }

  size_t inflight() const override { return share_->inflight_[index_]; }

  // Waits for this client's copies (the engine's progress keeps going for the others, whose
  // completions stay queued for them), then forgets them. Copies end in bounded time; the
  // bound here only keeps a broken device from hanging a close forever.
  void drain() override {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (share_->inflight_[index_] > share_->done_[index_].size() && std::chrono::steady_clock::now() < give_up) {
      share_->pump();
      if (share_->inflight_[index_] > share_->done_[index_].size()) std::this_thread::yield();
    }
    share_->inflight_[index_] = 0;
    share_->done_[index_].clear();
  }

 private:
  std::shared_ptr<CopyEngineShare> share_;
  uint64_t index_;
};

std::unique_ptr<CopyEngine> CopyEngineShare::client() {
  done_.emplace_back();
  inflight_.push_back(0);
  pumps_seen_.push_back(pumps_);
  return std::make_unique<Client>(shared_from_this(), done_.size() - 1);
}

bool CopyEngineShare::must_pump_for(uint64_t client) const {
  if (submits_since_pump_ > 0) return true;
  return pumps_seen_[client] == pumps_ && engine_->inflight() > 0;
}

void CopyEngineShare::pump() {
  ++pumps_;
  submits_since_pump_ = 0;
  scratch_.clear();
  engine_->progress(scratch_);
  for (CopyDone& d : scratch_) {
    const uint64_t client = d.op >> kOpBits;
    if (client >= done_.size()) continue;  // not ours (cannot happen: every op was tagged)
    d.op &= kOpMask;
    done_[client].push_back(std::move(d));
  }
}

}  // namespace fabric_lib::gpu
