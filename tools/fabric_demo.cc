// fabric-demo: a short local two-process transfer. The parent writes a patterned buffer into the
// child's memory with sharded WRITE_WITH_IMM requests; the child waits for the imm count
// imm_count_of() predicts, checks every byte and reports. Prints what moved and how fast.
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "common/control_channel.h"
#include "common/pattern.h"
#include "fabric_lib/fabric_lib.h"

using namespace fabric_lib;
using tools::ControlChannel;

namespace {

struct Options {
  std::string provider = "tcp";
  std::string interface_name = "lo";
  size_t domains = 1;
  size_t total_mib = 256;
  size_t chunk_kib = 4096;
  size_t window = 16;
  uint64_t seed = 42;
};

constexpr uint32_t kImm = 7;
constexpr auto kTimeout = std::chrono::seconds(120);

Result<std::unique_ptr<TransferEngine>> build(const Options& o) {
  TransferEngineBuilder b;
  b.provider(o.provider).domains_per_group(o.domains);
  if (!o.interface_name.empty()) b.interfaces({o.interface_name});
  return b.build();
}

int fail(const char* who, const Status& s) {
  std::fprintf(stderr, "fabric-demo %s: %s\n", who, s.to_string().c_str());
  return 1;
}

int run_target(const Options& o, ControlChannel ch) {
  auto engine = build(o);
  if (!engine.ok()) return fail("target", engine.status());
  const size_t bytes = o.total_mib << 20;
  std::vector<uint8_t> region(bytes, 0);
  auto reg = (*engine)->register_memory(region.data(), bytes, Access::kRemoteWrite);
  if (!reg.ok()) return fail("target", reg.status());
  ch.send(reg->desc.to_hex());
  auto expect = ch.recv(kTimeout);
  if (!expect) return fail("target", Status(ErrorCode::kPeerUnreachable, "no expectation from the writer"));
  CompletionCounter reached;
  Status s = (*engine)->imms().expect(kImm, std::stoull(*expect), Completion::counter(reached));
  if (!s.ok()) return fail("target", s);
  if (!reached.wait_for(1, kTimeout)) {
    ch.send("timeout");
    return 1;
  }
  const size_t bad = tools::find_pattern_mismatch(region.data(), bytes, o.seed);
  ch.send(bad == bytes ? "ok" : "mismatch at byte " + std::to_string(bad));
  ch.recv(kTimeout);  // the writer's goodbye: stay alive until it no longer needs us
  return bad == bytes ? 0 : 1;
}

int run_writer(const Options& o, ControlChannel ch) {
  auto engine = build(o);
  if (!engine.ok()) return fail("writer", engine.status());
  auto hex = ch.recv(kTimeout);
  if (!hex) return fail("writer", Status(ErrorCode::kPeerUnreachable, "target did not start"));
  auto desc = MrDesc::from_hex(*hex);
  if (!desc.ok()) return fail("writer", desc.status());

  const size_t bytes = o.total_mib << 20;
  const size_t chunk = std::min(bytes, o.chunk_kib << 10);
  std::vector<uint8_t> source(bytes);
  tools::fill_pattern(source.data(), bytes, o.seed);
  auto reg = (*engine)->register_memory(source.data(), bytes, Access::kLocalOnly);
  if (!reg.ok()) return fail("writer", reg.status());

  std::vector<WriteRequest> requests;
  uint64_t imms = 0;
  for (size_t off = 0; off < bytes; off += chunk) {
    WriteRequest w{reg->handle, off, *desc, off, std::min(chunk, bytes - off), kImm};
    imms += imm_count_of(w, (*engine)->num_domains());
    requests.push_back(std::move(w));
  }
  ch.send(std::to_string(imms));

  CompletionCounter done;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    while (i - done.finished() >= o.window) std::this_thread::yield();
    auto id = (*engine)->submit_write(requests[i], Completion::counter(done));
    if (!id.ok()) return fail("writer", id.status());
  }
  done.wait_for(requests.size(), kTimeout);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto verdict = ch.recv(kTimeout);
  ch.send("bye");
  const bool ok = done.errors == 0 && done.done == requests.size() && verdict && *verdict == "ok";
  std::printf("fabric-demo: provider %s, %zu domain(s), %zu writes of %zu KiB (window %zu), %llu imms\n",
              (*engine)->provider().c_str(), o.domains, requests.size(), chunk >> 10, o.window,
              static_cast<unsigned long long>(imms));
  std::printf("fabric-demo: moved %zu MiB in %.3f s = %.2f Gbps (%.2f GiB/s); target check: %s\n", bytes >> 20,
              seconds, bytes * 8.0 / seconds / 1e9, bytes / seconds / (1 << 30),
              verdict ? verdict->c_str() : "no answer");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"fabric-demo: a local two-process transfer with fabric-lib"};
  app.add_option("--provider", o.provider, "libfabric provider (tcp, shm, udp;ofi_rxd, efa, ...)");
  app.add_option("--interface", o.interface_name, "domain/interface name ('' = provider default)");
  app.add_option("--domains", o.domains, "domains per group")->check(CLI::Range(1, 16));
  app.add_option("--mib", o.total_mib, "MiB to move")->check(CLI::Range(1, 16384));
  app.add_option("--chunk-kib", o.chunk_kib, "KiB per write request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--window", o.window, "write requests in flight")->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);
  if (o.provider == "shm") o.interface_name.clear();

  auto [parent_end, child_end] = tools::make_channel_pair();
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    return 1;
  }
  if (pid == 0) {
    parent_end = ControlChannel();
    _exit(run_target(o, std::move(child_end)));
  }
  child_end = ControlChannel();
  int rc = run_writer(o, std::move(parent_end));
  int status = 0;
  waitpid(pid, &status, 0);
  const bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!child_ok) std::fprintf(stderr, "fabric-demo: target process failed\n");
  return rc == 0 && child_ok ? 0 : 1;
}
