// TrainerEndpoint::send(): one step of the pipeline (trainer.h describes the stages).
#include <chrono>
#include <numeric>

#include "fabric_lib/weights/imm_values.h"
#include "fabric_lib/weights/prepare.h"
#include "trainer_state.h"

namespace fabric_lib::weights {
namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class Step {
 public:
  Step(TrainerEndpoint::State& s, uint64_t version)
      : s_(s), plan_(s.setup->plan), v_(version), deadline_(Clock::now() + s.options.step_timeout) {}

  Status run() {
    const Clock::time_point start = Clock::now();
    const size_t groups = s_.setup->group_names.size();
    for (uint32_t g = 0; g < groups && ok(); ++g) run_group(g);
    if (ok()) barrier();
    drain();
    if (!ok()) {
      for (uint32_t g = 0; g < groups; ++g) (void)s_.engine->imms().release(gather_imm(v_, g));
      (void)s_.engine->imms().release(done_imm(v_));
    }
    stats_.total_s = seconds_since(start);
    s_.last = stats_;
    std::lock_guard<std::mutex> lock(mu_);
    s_.step_metrics.record(stats_, error_.ok());
    return error_;
  }

 private:
  bool ok() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_.ok();
  }
  void fail(const Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) {
      error_ = Status(st.code(), "trainer rank " + std::to_string(s_.options.rank) + ", version " + std::to_string(v_) + ": " + st.message());
    }
    cv_.notify_all();
  }
  // Waits until pred() or an error or the deadline (which becomes the error).
  template <typename Pred>
  bool wait(Pred pred, const char* what) {
    std::unique_lock<std::mutex> lock(mu_);
    const bool done = cv_.wait_until(lock, deadline_, [&] { return !error_.ok() || pred(); });
    if (!done && error_.ok()) {
      error_ = Status(ErrorCode::kDeadlineExceeded, "trainer rank " + std::to_string(s_.options.rank) + ", version " +
                                                        std::to_string(v_) + ": step deadline passed while " + what);
    }
    return error_.ok();
  }

  void run_group(uint32_t g) {
    const Clock::time_point t0 = Clock::now();
    // 1. Raw rows for other trainers' staged blocks.
    for (const Contribution& c : plan_.contributions) {
      if (c.group != g) continue;
      const TrainerShard& sh = s_.metadata.shards[c.shard];
      submit(c.write, s_.regions[sh.region].reg.handle, gather_imm(v_, g), nullptr);
    }
    // 2. This trainer's own rows of its staged blocks, and the wait for the others'.
    bool gathering = plan_.gather_imms[g] > 0;
    for (const StagedUnit& u : plan_.staged) {
      if (u.group != g) continue;
      for (const LocalPart& l : u.local_parts) {
        const TrainerShard& sh = s_.metadata.shards[l.shard];
        const size_t es = element_size(sh.dtype);
        const uint8_t* src = s_.regions[sh.region].ptr + sh.offset + ((l.box.r0 - sh.box.r0) * sh.box.cols() + (l.box.c0 - sh.box.c0)) * es;
        uint8_t* dst = s_.staging.data() + u.staging_offset + ((l.box.r0 - u.box.r0) * u.box.cols() + (l.box.c0 - u.box.c0)) * es;
        Status st = s_.preparer->copy_to_host(src, sh.box.cols(), s_.regions[sh.region].kind, dst, u.box.cols(), l.box.rows(),
                                              l.box.cols(), es);
        if (!st.ok()) fail(st);
      }
    }
    bool gathered = !gathering, called_back = !gathering;
    if (gathering) {
      Status st = s_.engine->imms().expect(gather_imm(v_, g), plan_.gather_imms[g], Completion::callback([this, &gathered, &called_back](const Status& x) {
        std::lock_guard<std::mutex> lock(mu_);
        called_back = true;
        if (x.ok()) {
          gathered = true;
        } else if (error_.ok()) {
          error_ = Status(x.code(), "trainer rank " + std::to_string(s_.options.rank) + ", version " + std::to_string(v_) + ": staged rows from other trainers did not arrive: " + x.message());
        }
        cv_.notify_all();
      }).with_deadline(deadline_));
      if (!st.ok()) {
        fail(st);
        called_back = true;  // nothing will call back
      } else {
      }
    }
    stats_.prepare_s += seconds_since(t0);
    // 3. Own tasks, then staged ones once gathered.
    for (const PrepareTask& t : plan_.tasks) {
      if (t.group == g && t.source == PrepareTask::Source::kShard && ok()) run_task(t);
    }
    const Clock::time_point tg = Clock::now();
    wait([&] { return gathered; }, "waiting for staged rows from other trainers");
    stats_.gather_wait_s += seconds_since(tg);
    for (const PrepareTask& t : plan_.tasks) {
      if (t.group == g && t.source == PrepareTask::Source::kStaging && ok()) run_task(t);
    }
    // 4. The group ends when its writes completed (groups run one after another).
    const Clock::time_point tw = Clock::now();
    wait([&] { return outstanding_ == 0; }, "waiting for writes to complete");
    stats_.write_wait_s += seconds_since(tw);
    bool pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending = !called_back;
    }
    if (pending) {  // an error ended the wait early: end the expectation, keep its target alive
      (void)s_.engine->imms().release(gather_imm(v_, g));
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return called_back; });
    }
  }

  void run_task(const PrepareTask& t) {
    ++stats_.tasks;
    MrHandle src;
    uint64_t base = 0, bytes = t.prepared_bytes();
    if (t.direct) {
      src = s_.regions[s_.metadata.shards[t.index].region].reg.handle;
    } else {
      const Clock::time_point tw = Clock::now();
      std::optional<uint64_t> off;
      wait([&] { return (off = s_.arena->allocate(bytes)).has_value(); }, "waiting for prepared-buffer memory (watermark)");
      stats_.watermark_wait_s += seconds_since(tw);
      if (!off) return;
      base = *off;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.max_prepared_in_use = std::max(stats_.max_prepared_in_use, s_.arena->used());
      }
      const Clock::time_point tp = Clock::now();
      Status st;
      uint8_t* out = s_.arena_memory + base;
      if (t.source == PrepareTask::Source::kShard) {
        const TrainerShard& sh = s_.metadata.shards[t.index];
        const uint8_t* in = s_.regions[sh.region].ptr + sh.offset +
                            ((t.box.r0 - sh.box.r0) * sh.box.cols() + (t.box.c0 - sh.box.c0)) * element_size(sh.dtype);
        st = s_.preparer->prepare(t, sh.dtype, in, sh.box.cols(), s_.regions[sh.region].kind, out);
      } else {
        const StagedUnit& u = plan_.staged[t.index];
        st = s_.preparer->prepare(t, u.source_dtype, s_.staging.data() + u.staging_offset, u.box.cols(), MemoryKind::kHost, out);
      }
      stats_.prepare_s += seconds_since(tp);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        s_.arena->release(base, bytes);
        if (error_.ok()) error_ = st;
        return;
      }
      src = s_.arena_reg.handle;
    }
    // One reference per write; the last completion frees the prepared buffer.
    auto remaining = std::make_shared<size_t>(t.writes.size() + t.scale_writes.size());
    auto release = [this, remaining, direct = t.direct, base, bytes] {
      if (--*remaining == 0 && !direct) s_.arena->release(base, bytes);  // under mu_
    };
    for (const WriteOp& w : t.writes) submit(w, src, data_imm(v_), release, base);
    for (const WriteOp& w : t.scale_writes) submit(w, src, data_imm(v_), release, base);
  }

  // Submits one planned write; `on_done` runs under mu_ when it completed (or failed to start).
  void submit(const WriteOp& w, MrHandle src, uint32_t imm, std::function<void()> on_done, uint64_t src_base = 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++outstanding_;
    }
    auto done = [this, on_done](const Status& st) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!st.ok() && error_.ok()) {
        error_ = Status(st.code(), "trainer rank " + std::to_string(s_.options.rank) + ", version " + std::to_string(v_) + ": a write failed: " + st.message());
      }
      if (on_done) on_done();
      --outstanding_;
      cv_.notify_all();
    };
    Result<TransferId> id = Status(ErrorCode::kInternal, "unset");
    if (w.pages == 1) {
      WriteRequest r;
      r.src = src;
      r.src_offset = src_base + w.src_offset;
      r.dst = s_.targets[w.target];
      r.dst_offset = w.dst_offset;
      r.length = w.length;
      r.imm = imm;
      r.route = Pinned{w.domain};
      id = s_.engine->submit_write(std::move(r), Completion::callback(done).with_deadline(deadline_));
    } else {
      PagedWriteRequest r;
      r.src = src;
      r.dst = s_.targets[w.target];
      r.page_length = w.length;
      r.src_pages.resize(w.pages);
      std::iota(r.src_pages.begin(), r.src_pages.end(), 0u);
      r.dst_pages = r.src_pages;
      r.src_stride = w.src_stride;
      r.dst_stride = w.dst_stride;
      r.src_offset = src_base + w.src_offset;
      r.dst_offset = w.dst_offset;
      r.imm = imm;
      r.route = Pinned{w.domain};
      id = s_.engine->submit_paged_writes(std::move(r), Completion::callback(done).with_deadline(deadline_));
    }
    if (!id.ok()) {
      done(id.status());
      return;
    }
    stats_.bytes_written += w.length * w.pages;
    stats_.wrs += w.pages;
  }

  void barrier() {
    const Clock::time_point t0 = Clock::now();
    bool sent = false, all = s_.options.world == 1;
    Result<TransferId> id = s_.engine->submit_barrier(done_imm(v_), s_.barrier_peers, Completion::callback([this, &sent](const Status& st) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!st.ok() && error_.ok()) error_ = Status(st.code(), "trainer rank " + std::to_string(s_.options.rank) + ", version " + std::to_string(v_) + ": barrier failed: " + st.message());
      sent = true;
      cv_.notify_all();
    }).with_deadline(deadline_));
    if (!id.ok()) {
      fail(id.status());
      sent = true;
    }
    if (!all) {
      Status st = s_.engine->imms().expect(done_imm(v_), s_.options.world - 1, Completion::callback([this, &all](const Status& x) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!x.ok() && error_.ok()) error_ = Status(x.code(), "trainer rank " + std::to_string(s_.options.rank) + ", version " + std::to_string(v_) + ": not every trainer finished the step: " + x.message());
        all = true;
        cv_.notify_all();
      }).with_deadline(deadline_));
      if (!st.ok()) {
        fail(st);
        all = true;
      }
    }
    // Both callbacks reference this frame: wait for them whatever happens (their deadlines bound it).
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return sent && all; });
    stats_.barrier_s = seconds_since(t0);
  }

  // Every accepted write completes (deadlines bound it): wait so no callback outlives the step.
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
  }

  TrainerEndpoint::State& s_;
  const TrainerPlan& plan_;
  const uint64_t v_;
  const Clock::time_point deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  Status error_;
  uint64_t outstanding_ = 0;
  StepStats stats_;
};

}  // namespace

Status TrainerEndpoint::send(uint64_t version) {
  if (!state_->ready) return Status(ErrorCode::kFailedPrecondition, "trainer endpoint: send before a successful connect()");
  if (state_->engine->on_callback_thread()) return Status(ErrorCode::kFailedPrecondition, "trainer endpoint: send on the callback thread");
  return Step(*state_, version).run();
}

}  // namespace fabric_lib::weights
