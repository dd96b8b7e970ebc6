// WorkerInbox: how submitters and other threads hand requests and commands to a group's worker.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "core/worker_inbox.h"

namespace fabric_lib::detail {
namespace {

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

Request* make_request(uint64_t id) {
  auto* r = new Request();
  r->id = id;
  return r;
}

// Requests from one producer come out in the order they went in, and nothing is invented.
TEST(WorkerInbox, SingleProducerFifo) {
  WorkerInbox inbox;
  EXPECT_FALSE(inbox.has_work());
  for (uint64_t i = 0; i < 1000; ++i) inbox.push_request(make_request(i));
  EXPECT_TRUE(inbox.has_work());
  std::vector<Request*> buf(64);
  uint64_t next = 0;
  while (true) {
    const size_t n = inbox.pop_requests(buf.data(), buf.size());
    if (n == 0) break;
    ASSERT_LE(n, buf.size());
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(buf[i]->id, next++);
      delete buf[i];
    }
  }
  EXPECT_EQ(next, 1000u);
  EXPECT_FALSE(inbox.has_work());
  EXPECT_EQ(inbox.pop_requests(buf.data(), buf.size()), 0u);
}

// 4 producer threads x 10000 requests while a consumer pops concurrently: every request comes
// out exactly once and each producer's requests come out in its order.
TEST(WorkerInbox, ManyProducersNothingLostFifoPerProducer) {
  constexpr int kProducers = 4;
  constexpr uint64_t kPerProducer = 10000;
  WorkerInbox inbox;
  std::atomic<bool> go{false};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      while (!go.load(std::memory_order_acquire)) {
      }
      for (uint64_t i = 0; i < kPerProducer; ++i) inbox.push_request(make_request((uint64_t(p) << 32) | i));
    });
  }
  std::vector<uint64_t> next(kProducers, 0);
  std::vector<bool> in_order(kProducers, true);
  uint64_t total = 0;
  std::thread consumer([&] {
    std::vector<Request*> buf(37);
    while (total < kProducers * kPerProducer) {
      const size_t n = inbox.pop_requests(buf.data(), buf.size());
      for (size_t i = 0; i < n; ++i) {
        const int p = static_cast<int>(buf[i]->id >> 32);
        const uint64_t seq = buf[i]->id & 0xffffffffu;
        if (p < 0 || p >= kProducers || seq != next[p]) {
          if (p >= 0 && p < kProducers) in_order[p] = false;
        } else {
          ++next[p];
        }
        ++total;
        delete buf[i];
      }
      if (n == 0) std::this_thread::yield();
    }
  });
  go.store(true, std::memory_order_release);
  for (auto& t : producers) t.join();
  consumer.join();
  EXPECT_EQ(total, kProducers * kPerProducer);
  for (int p = 0; p < kProducers; ++p) {
    EXPECT_TRUE(in_order[p]) << "producer " << p;
    EXPECT_EQ(next[p], kPerProducer) << "producer " << p;
  }
  EXPECT_FALSE(inbox.has_work());
}

// post() queues commands; run_commands() runs them on the calling (worker) thread with
// alive = true, in order, once each, and reports how many ran.
TEST(WorkerInbox, CommandsRunAliveOnWorker) {
  WorkerInbox inbox;
  std::vector<int> ran;
  std::vector<bool> alive;
  EXPECT_EQ(inbox.run_commands(), 0u);
  for (int i = 0; i < 5; ++i) {
    inbox.post([&, i](bool a) {
      ran.push_back(i);
      alive.push_back(a);
    });
  }
  EXPECT_TRUE(ran.empty()) << "post() must not run the command itself";
  EXPECT_TRUE(inbox.has_work());
  EXPECT_EQ(inbox.run_commands(), 5u);
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(alive, std::vector<bool>(5, true));
  EXPECT_FALSE(inbox.has_work());
  EXPECT_EQ(inbox.run_commands(), 0u);
  EXPECT_EQ(ran.size(), 5u);
}

// After close_and_refuse(), queued commands run once with alive = false (inside the call), and
// later posts run inline on the posting thread with alive = false; run_commands() runs nothing.
TEST(WorkerInbox, CloseAnswersQueuedAndLaterCommandsNotAlive) {
  WorkerInbox inbox;
  std::vector<int> calls(6, 0);
  std::vector<int> alive_calls(6, 0);
  auto cmd = [&](int i) {
    return [&, i](bool a) {
      ++calls[i];
      alive_calls[i] += a;
    };
  };
  inbox.post(cmd(0));
  EXPECT_EQ(inbox.run_commands(), 1u);
  inbox.post(cmd(1));
  inbox.post(cmd(2));
  inbox.close_and_refuse();
  EXPECT_EQ(calls[1], 1);
  EXPECT_EQ(calls[2], 1);
  EXPECT_EQ(alive_calls[1], 0);
  EXPECT_EQ(alive_calls[2], 0);

  std::thread::id ran_on;
  inbox.post([&](bool a) {
    ran_on = std::this_thread::get_id();
    ++calls[3];
    alive_calls[3] += a;
  });
  EXPECT_EQ(calls[3], 1) << "a post after close must be answered inline";
  EXPECT_EQ(alive_calls[3], 0);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(inbox.run_commands(), 0u);
  inbox.close_and_refuse();  // a second close answers nothing twice
  EXPECT_EQ(calls, (std::vector<int>{1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(alive_calls[0], 1);
}

// Commands posted from several threads while the worker runs and then closes: each command runs
// exactly once, alive while the worker was running, not alive after it closed.
TEST(WorkerInbox, ConcurrentPostsAndCloseRunEachCommandOnce) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  WorkerInbox inbox;
  std::vector<std::atomic<int>> runs(kThreads * kPerThread);
  std::atomic<int> alive_runs{0}, dead_runs{0};
  std::atomic<int> posted{0};
  std::atomic<bool> stop_worker{false};
  std::thread worker([&] {
    while (!stop_worker.load(std::memory_order_acquire)) inbox.run_commands();
    inbox.close_and_refuse();
  });
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int id = t * kPerThread + i;
        inbox.post([&, id](bool alive) {
          runs[id].fetch_add(1);
          (alive ? alive_runs : dead_runs).fetch_add(1);
        });
        // Close the worker midway through.
        if (posted.fetch_add(1) == kThreads * kPerThread / 2) stop_worker.store(true, std::memory_order_release);
      }
    });
  }
  for (auto& t : posters) t.join();
  worker.join();
  for (int id = 0; id < kThreads * kPerThread; ++id) ASSERT_EQ(runs[id].load(), 1) << "command " << id;
  EXPECT_EQ(alive_runs.load() + dead_runs.load(), kThreads * kPerThread);
  // And one more after everything: answered inline, not alive.
  int late = -1;
  inbox.post([&](bool alive) { late = alive; });
  EXPECT_EQ(late, 0);
}

// Sleep protocol: wake() signals the eventfd only while the worker says it sleeps;
// clear_wakeups() drains it.
TEST(WorkerInbox, WakesOnlyWhenSleeping) {
  WorkerInbox inbox;
  ASSERT_GE(inbox.event_fd(), 0);
  EXPECT_FALSE(readable(inbox.event_fd()));
  inbox.push_request(make_request(1));
  EXPECT_FALSE(readable(inbox.event_fd())) << "awake worker: no wakeup needed";
  inbox.set_sleeping(true);
  inbox.push_request(make_request(2));
  EXPECT_TRUE(readable(inbox.event_fd()));
  inbox.clear_wakeups();
  EXPECT_FALSE(readable(inbox.event_fd()));
  inbox.post([](bool) {});
  EXPECT_TRUE(readable(inbox.event_fd()));
  inbox.clear_wakeups();
  inbox.set_sleeping(false);
  inbox.post([](bool) {});
  EXPECT_FALSE(readable(inbox.event_fd()));
  EXPECT_EQ(inbox.run_commands(), 2u);
  Request* buf[4];
  EXPECT_EQ(inbox.pop_requests(buf, 4), 2u);
  delete buf[0];
  delete buf[1];
}

// Pops up to `max` requests and returns their ids in the order they came out (freeing them).
std::vector<uint64_t> pop_ids(WorkerInbox& inbox, size_t max) {
  std::vector<Request*> buf(max);
  const size_t n = inbox.pop_requests(buf.data(), max);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < n; ++i) {
    ids.push_back(buf[i]->id);
    delete buf[i];
  }
  return ids;
}

// A request that finds the inbox empty goes through the one-request slot: it must count as work,
// wake a sleeping worker, come out before requests queued after it, and leave nothing behind.
TEST(WorkerInbox, TheSlotWakesCountsAndKeepsOrder) {
  WorkerInbox inbox;
  inbox.set_sleeping(true);
  inbox.push_request(make_request(1));  // the slot (the inbox was empty)
  EXPECT_TRUE(readable(inbox.event_fd()));
  EXPECT_TRUE(inbox.has_requests());
  EXPECT_TRUE(inbox.has_work());
  inbox.clear_wakeups();
  inbox.push_request(make_request(2));  // the slot is taken: queued
  inbox.push_request(make_request(3));
  EXPECT_TRUE(readable(inbox.event_fd()));
  EXPECT_EQ(pop_ids(inbox, 2), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(inbox.has_requests());
  // Request 3 is still queued: a new one must queue behind it, not take the free slot.
  inbox.push_request(make_request(4));
  EXPECT_EQ(pop_ids(inbox, 3), (std::vector<uint64_t>{3, 4}));
  EXPECT_FALSE(inbox.has_requests());
  EXPECT_TRUE(pop_ids(inbox, 2).empty());
  // Fewer than two places: nothing is taken (one is kept for the slot's request).
  inbox.push_request(make_request(5));
  Request* buf[1];
  EXPECT_EQ(inbox.pop_requests(buf, 0), 0u);
  EXPECT_EQ(inbox.pop_requests(buf, 1), 0u);
  EXPECT_EQ(pop_ids(inbox, 2), (std::vector<uint64_t>{5}));
}

// Requests still queued when the inbox is destroyed are deleted (their completions released).
TEST(WorkerInbox, DestructorFreesQueuedRequests) {
  auto token = std::make_shared<int>(0);
  {
    WorkerInbox inbox;
    for (int i = 0; i < 10; ++i) {
      Request* r = make_request(i);
      r->completion = Completion::callback([token](const Status&) {});
      inbox.push_request(r);
    }
    EXPECT_EQ(token.use_count(), 11);
  }
  EXPECT_EQ(token.use_count(), 1);
}

}  // namespace
}  // namespace fabric_lib::detail
