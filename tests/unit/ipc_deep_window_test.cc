// How many of a KV layer's paged writes (4096 pages each) the engine keeps in flight on one
// same-host IPC domain. The ipc domain tells the engine how many WRs it may hold outstanding
// (DomainInfo::max_inflight, IpcOptions::max_inflight_wrs); a paged write's pages there are one op,
// so that count, not the domain's ops, is what limits a deep window. The engine keeps up to 7/8 of
// it outstanding to one peer: at 16384 (until 2026-12-06) 14336 WRs, three and a half 4096-page
// requests, and fabric-bench's 4096 x 4 KiB point read the same at window 16 as at window 4 (0.66x
// of a contiguous copy on one H100); at 65536 57344 WRs, fourteen requests (0.87x at window 16).
// Checked with the domain's completions held back: the WRs the engine posts before any completes.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/builder_testing.h"
#include "fabric_lib/fabric_lib.h"
#include "support/bounds.h"
#include "support/forwarding_domain.h"
#include "support/eventually.h"

namespace fabric_lib {
namespace {

constexpr uint32_t kPagesPerRequest = 4096;
constexpr uint32_t kRequests = 16;
constexpr uint64_t kPage = 64;  // small pages: the count of WRs is what matters

// Counts the pages posted as page runs; while `hold` is set its polls return nothing (and do not
// reach the ipc domain, whose polls move the copies), so nothing completes.
struct Held {
  std::atomic<bool> hold{true};
  std::atomic<uint64_t> pages_posted{0};
};

class HoldingDomain final : public testing::ForwardingDomain {
 public:
  HoldingDomain(std::unique_ptr<transport::Domain> inner, std::shared_ptr<Held> held)
      : ForwardingDomain(std::move(inner)), held_(std::move(held)) {}
  size_t post_pages(const transport::PageRunWr& run, transport::PostResult* last, Status* e) override {
    const size_t n = inner_->post_pages(run, last, e);
    held_->pages_posted.fetch_add(n);
    return n;
  }
  size_t post_writes(std::span<const transport::WriteWr> wrs, transport::PostResult* last, Status* e) override {
    return inner_->post_writes(wrs, last, e);
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override {
    return held_->hold.load() ? 0 : inner_->poll(out, max);
  }

 private:
  std::shared_ptr<Held> held_;
};

TEST(IpcDeepWindow, FourteenRequestsOf4096PagesAreInFlightOnOneDomainAtOnce) {
  auto held = std::make_shared<Held>();
  TransferEngineBuilder sb;
  sb.provider("ipc").domains_per_group(1).stall_timeout(std::chrono::nanoseconds(0));  // held on purpose
  BuilderAccess::set_domain_decorator(
      sb, [held](std::unique_ptr<transport::Domain> inner) { return std::make_unique<HoldingDomain>(std::move(inner), held); });
  Result<std::unique_ptr<TransferEngine>> s = sb.build();
  Result<std::unique_ptr<TransferEngine>> r = TransferEngineBuilder().provider("ipc").domains_per_group(1).build();
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::unique_ptr<TransferEngine> sender = std::move(s).value(), receiver = std::move(r).value();
  const uint64_t bytes = uint64_t{kRequests} * kPagesPerRequest * kPage;
  std::vector<uint8_t> src(bytes), dst(bytes, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 29 + 3);
  Result<MrRegistration> sm = sender->register_memory(src.data(), src.size(), Access::kLocalOnly);
  Result<MrRegistration> dm = receiver->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  ASSERT_TRUE(sm.ok() && dm.ok());

  CompletionCounter done;
  for (uint32_t k = 0; k < kRequests; ++k) {
    PagedWriteRequest w;
    w.src = sm->handle;
    w.dst = dm->desc;
    w.page_length = w.src_stride = w.dst_stride = kPage;
    for (uint32_t i = 0; i < kPagesPerRequest; ++i) {
      w.src_pages.push_back(k * kPagesPerRequest + i);
      w.dst_pages.push_back(k * kPagesPerRequest + kPagesPerRequest - 1 - i);  // reversed within the request
    }
    ASSERT_TRUE(sender->submit_paged_writes(std::move(w), Completion::counter(done)).ok());
  }
  const uint64_t all = uint64_t{kRequests} * kPagesPerRequest;
  const uint64_t deep = 12 * uint64_t{kPagesPerRequest};  // well past four requests
  EXPECT_TRUE(testing::eventually([&] { return held->pages_posted.load() >= deep; }, testing::bounds::kRequests))
      << "posted " << held->pages_posted.load() << " of " << all << " pages before any completed";
  // Held polls return nothing, so nothing can have completed (no waiting needed to see it).
  EXPECT_EQ(done.finished(), 0u) << "a request completed while the domain's polls were held";

  held->hold.store(false);
  ASSERT_TRUE(done.wait_for(kRequests, testing::bounds::kRequests));
  EXPECT_EQ(done.errors.load(), 0u);
  EXPECT_EQ(held->pages_posted.load(), all) << "a page was posted twice";
  size_t wrong = 0;
  for (uint32_t k = 0; k < kRequests; ++k) {
    for (uint32_t i = 0; i < kPagesPerRequest; ++i) {
      const uint64_t from = (uint64_t{k} * kPagesPerRequest + i) * kPage;
      const uint64_t to = (uint64_t{k} * kPagesPerRequest + kPagesPerRequest - 1 - i) * kPage;
      wrong += std::memcmp(dst.data() + to, src.data() + from, kPage) != 0;
    }
  }
  EXPECT_EQ(wrong, 0u) << "pages not at their targets";
  sender->stop();
  receiver->stop();
}

}  // namespace
}  // namespace fabric_lib
