// A live metrics endpoint for fabric-top's test (fabric_top_test.py): a sender engine serving
// its Prometheus endpoint on a free loopback port, writing 64 KiB writes to a receiver engine in
// this process (tcp on lo, two domains) until stdin closes. Prints one line first,
//   endpoint <host:port> peer <the receiver's address, as the endpoint's peer label>
// and, once stdin is closed and the writes are drained, "moved <requests> <bytes>" before it
// exits 0 (non-zero, with the reason on stderr, when anything fails). Public API only.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "fabric_lib/fabric_lib.h"

using namespace fabric_lib;

namespace {

constexpr uint64_t kLength = 64 * 1024;
constexpr size_t kSlots = 16;  // writes in flight at most, each to its own slot
constexpr auto kMaxRun = std::chrono::seconds(120);  // bound, should the test never close stdin

int fail(const char* what, const Status& s) {
  std::fprintf(stderr, "metrics_source: %s: %s\n", what, s.to_string().c_str());
  return 1;
}

Result<std::unique_ptr<TransferEngine>> build(bool endpoint) {
  TransferEngineBuilder b;
  b.provider("tcp").interfaces({"lo"}).domains_per_group(2);
  if (endpoint) b.metrics_endpoint("127.0.0.1:0");
  return b.build();
}

}  // namespace

int main() {
  Result<std::unique_ptr<TransferEngine>> receiver = build(false);
  if (!receiver.ok()) return fail("receiver engine", receiver.status());
  Result<std::unique_ptr<TransferEngine>> sender = build(true);
  if (!sender.ok()) return fail("sender engine", sender.status());
  std::vector<uint8_t> src(kSlots * kLength, 0x5a), dst(kSlots * kLength, 0);
  Result<MrRegistration> src_mr = (*sender)->register_memory(src.data(), src.size(), Access::kLocalOnly);
  if (!src_mr.ok()) return fail("register source", src_mr.status());
  Result<MrRegistration> dst_mr = (*receiver)->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  if (!dst_mr.ok()) return fail("register destination", dst_mr.status());
  std::printf("endpoint %s peer %s\n", (*sender)->metrics_endpoint().c_str(), (*receiver)->main_address().to_hex().c_str());
  std::fflush(stdout);

  static std::atomic<bool> closed{false};  // static: the watcher may outlive main's frame
  std::thread watch_stdin([] {
    char buf[64];
    while (::read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
    }
    closed = true;
  });
  CompletionCounter done;
  uint64_t submitted = 0;
  const auto start = std::chrono::steady_clock::now();
  Status failure;
  while (!closed && std::chrono::steady_clock::now() - start < kMaxRun) {
    if (submitted - done.finished() >= kSlots) {
      std::this_thread::yield();  // the window is full: the next completion frees a slot
      continue;
    }
    const uint64_t off = (submitted % kSlots) * kLength;
    Result<TransferId> id =
        (*sender)->submit_write({src_mr->handle, off, dst_mr->desc, off, kLength, std::nullopt}, Completion::counter(done));
    if (!id.ok()) {
      failure = id.status();
      break;
    }
    ++submitted;
  }
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (done.finished() < submitted && std::chrono::steady_clock::now() < drain_until) std::this_thread::yield();
  if (closed) {
    watch_stdin.join();
  } else {
    watch_stdin.detach();  // still in read(): the run hit its bound; exiting ends it
  }
  if (!failure.ok()) return fail("submit_write", failure);
  if (done.finished() < submitted) return fail("drain", Status(ErrorCode::kDeadlineExceeded, "writes did not complete"));
  if (done.errors.load() != 0) return fail("writes", Status(ErrorCode::kProviderError, "some writes failed"));
  std::printf("moved %llu %llu\n", static_cast<unsigned long long>(submitted),
              static_cast<unsigned long long>(submitted * kLength));
  std::fflush(stdout);
  (*sender)->stop();
  (*receiver)->stop();
  return 0;
}
