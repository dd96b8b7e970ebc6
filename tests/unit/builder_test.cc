// TransferEngineBuilder: build() validates every setting and reports problems as a Status
// (never an abort); a valid build over tcp on loopback gives a working engine whose stop() is
// idempotent and final.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib {
namespace {

class BuilderTest : public ::testing::Test {
 protected:
  void SetUp() override { TearDown(); }
  void TearDown() override {
    unsetenv("FABRIC_LIB_PROVIDER");
    unsetenv("FABRIC_LIB_IPC_LAUNCHER_COPIES");
    unsetenv("FABRIC_LIB_IPC_LAUNCHER_PIECES");
  }

  // A builder that would succeed: tcp on loopback.
  static TransferEngineBuilder good() {
    TransferEngineBuilder b;
    b.provider("tcp").interfaces({"lo"});
    return b;
  }
  static ErrorCode code_of(const TransferEngineBuilder& b) {
    Result<std::unique_ptr<TransferEngine>> r = b.build();
    if (r.ok()) {
      (*r)->stop();
      return ErrorCode::kOk;
    }
    EXPECT_FALSE(r.status().message().empty());
    return r.status().code();
  }
};

// Out-of-range counts and sizes are rejected with InvalidArgument before anything is opened.
TEST_F(BuilderTest, RejectsBadCountsAndSizes) {
  EXPECT_EQ(code_of(good().domains_per_group(0)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().domains_per_group(17)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().groups(0)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().groups(65)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().max_message_bytes(0)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().max_message_bytes((size_t{1} << 30) + 1)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().imm_table_capacity(0)), ErrorCode::kInvalidArgument);
}

// Worker pinning must name an existing CPU and an existing group.
TEST_F(BuilderTest, RejectsBadPinning) {
  EXPECT_EQ(code_of(good().pin_worker(0, 99999)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().pin_worker(0, -1)), ErrorCode::kInvalidArgument);
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  EXPECT_EQ(code_of(good().pin_worker(0, static_cast<int>(cpus))), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().pin_worker(1, 0)), ErrorCode::kInvalidArgument);  // only group 0 exists
  EXPECT_EQ(code_of(good().groups(2).pin_worker(2, 0)), ErrorCode::kInvalidArgument);
}

// Empty provider and interface names, and per-group interfaces for groups that do not exist,
// are rejected with InvalidArgument.
TEST_F(BuilderTest, RejectsBadNames) {
  EXPECT_EQ(code_of(good().provider("")), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().interfaces({""})), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().interfaces({"lo", ""})), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(good().group_interfaces(1, {"lo"})), ErrorCode::kInvalidArgument);
}

// An empty interface name is rejected in group_interfaces() just as in interfaces(), instead of
// silently meaning "any domain of the provider".
TEST_F(BuilderTest, RejectsEmptyGroupInterfaceName) {
  EXPECT_EQ(code_of(good().group_interfaces(0, {""})), ErrorCode::kInvalidArgument);
}

// The IPC backend's GPU copy settings are checked in every build, with or without CUDA: a copy
// mode it does not know, and a launcher threshold in the environment that is not a plain number,
// are InvalidArgument naming the setting; 0 (no launcher thread) and a number build; the
// threshold's old variable is InvalidArgument naming the new one.
TEST_F(BuilderTest, RejectsBadIpcCopySettings) {
  EXPECT_EQ(code_of(good().ipc_gpu_copies("fast")), ErrorCode::kInvalidArgument);
  for (const char* bad : {"abc", "-1", " 12", "+12", "12x", "99999999999999999999999"}) {
    setenv("FABRIC_LIB_IPC_LAUNCHER_COPIES", bad, 1);
    Result<std::unique_ptr<TransferEngine>> r = good().build();
    ASSERT_FALSE(r.ok()) << "'" << bad << "' accepted";
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("FABRIC_LIB_IPC_LAUNCHER_COPIES"), std::string::npos) << r.status().message();
  }
  for (const char* fine : {"0", "4096"}) {
    setenv("FABRIC_LIB_IPC_LAUNCHER_COPIES", fine, 1);
    EXPECT_EQ(code_of(good()), ErrorCode::kOk) << fine;
  }
  unsetenv("FABRIC_LIB_IPC_LAUNCHER_COPIES");
  EXPECT_EQ(code_of(good().ipc_launcher_copies(0)), ErrorCode::kOk);
  // The variable's old name (it counted kernel pieces) is refused with the new one named, not
  // silently ignored.
  setenv("FABRIC_LIB_IPC_LAUNCHER_PIECES", "1024", 1);
  Result<std::unique_ptr<TransferEngine>> r = good().build();
  unsetenv("FABRIC_LIB_IPC_LAUNCHER_PIECES");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("FABRIC_LIB_IPC_LAUNCHER_COPIES"), std::string::npos) << r.status().message();
}

// The page-copy kernel's shape and the copy streams (diagnosis variables): a count of warps, 4 or
// 8 loads per lane, 1 to 16 streams; anything else is refused with the variable named.
TEST_F(BuilderTest, RejectsBadIpcKernelShapeSettings) {
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"FABRIC_LIB_IPC_LAUNCH_WARPS", {"abc", "-1", " 12", "12x", "99999999999999999999999"}},
      {"FABRIC_LIB_IPC_COPY_LOADS", {"abc", "-4", "0", "2", "6", "16", "8x"}},
      {"FABRIC_LIB_IPC_COPY_STREAMS", {"abc", "-1", "0", "17", "4x", "99999999999999999999999"}},
  };
  for (const auto& [name, bads] : cases) {
    for (const char* bad : bads) {
      setenv(name, bad, 1);
      Result<std::unique_ptr<TransferEngine>> r = good().build();
      unsetenv(name);
      ASSERT_FALSE(r.ok()) << name << "='" << bad << "' accepted";
      EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << name << "=" << bad;
      EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
    }
  }
  for (const auto& [name, value] : {std::pair{"FABRIC_LIB_IPC_LAUNCH_WARPS", "0"}, std::pair{"FABRIC_LIB_IPC_LAUNCH_WARPS", "8192"},
                                    std::pair{"FABRIC_LIB_IPC_COPY_LOADS", "4"}, std::pair{"FABRIC_LIB_IPC_COPY_LOADS", "8"},
                                    std::pair{"FABRIC_LIB_IPC_COPY_STREAMS", "1"}, std::pair{"FABRIC_LIB_IPC_COPY_STREAMS", "16"}}) {
    setenv(name, value, 1);
    EXPECT_EQ(code_of(good()), ErrorCode::kOk) << name << "=" << value;
    unsetenv(name);
  }
}

// A provider libfabric does not know is an error Status (ProviderError or NotFound), not an abort.
TEST_F(BuilderTest, UnknownProviderIsAnError) {
  const ErrorCode code = code_of(good().provider("no-such-provider"));
  EXPECT_TRUE(code == ErrorCode::kProviderError || code == ErrorCode::kNotFound) << error_code_name(code);
  // Also without explicit interfaces (the default-interface lookup fails first).
  TransferEngineBuilder b;
  b.provider("no-such-provider");
  const ErrorCode code2 = code_of(b);
  EXPECT_TRUE(code2 == ErrorCode::kProviderError || code2 == ErrorCode::kNotFound) << error_code_name(code2);
}

// An interface the provider does not offer is NotFound (also when only a later domain names it).
TEST_F(BuilderTest, UnknownInterfaceIsNotFound) {
  EXPECT_EQ(code_of(good().interfaces({"nonexistent0"})), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(good().domains_per_group(2).interfaces({"lo", "nonexistent0"})), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(good().groups(2).group_interfaces(1, {"nonexistent0"})), ErrorCode::kNotFound);
}

// FABRIC_LIB_PROVIDER overrides the provider set in code.
TEST_F(BuilderTest, EnvironmentOverridesProvider) {
  setenv("FABRIC_LIB_PROVIDER", "no-such-provider", 1);
  const ErrorCode code = code_of(good());
  EXPECT_TRUE(code == ErrorCode::kProviderError || code == ErrorCode::kNotFound) << error_code_name(code);
}

// A valid build on tcp/lo: sane identity, working registration, stop() idempotent, and every
// call after stop() refused with Stopped; a pending imm expectation ends Cancelled.
TEST_F(BuilderTest, ValidBuildAndStop) {
  Result<std::unique_ptr<TransferEngine>> built = good().domains_per_group(2).build();
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  TransferEngine& e = **built;
  EXPECT_EQ(e.num_domains(), 2u);
  EXPECT_EQ(e.num_groups(), 1u);
  EXPECT_NE(e.provider().find("tcp"), std::string::npos) << e.provider();
  const DomainAddress main = e.main_address();
  EXPECT_FALSE(main.empty());
  EXPECT_LE(main.bytes().size(), kMaxDomainAddressBytes);
  const std::vector<DomainAddress> addrs = e.domain_addresses(0);
  ASSERT_EQ(addrs.size(), 2u);
  EXPECT_TRUE(addrs[0] == main);
  EXPECT_FALSE(addrs[0] == addrs[1]) << "two domains, two endpoints";
  EXPECT_TRUE(e.domain_addresses(1).empty());
  Result<DomainAddress> reparsed = DomainAddress::from_hex(main.to_hex());
  ASSERT_TRUE(reparsed.ok());
  EXPECT_TRUE(*reparsed == main);
  EXPECT_FALSE(e.stopped());

  std::vector<uint8_t> buf(8192, 0x5a);
  Result<MrRegistration> reg = e.register_memory(buf.data(), buf.size(), Access::kRemoteWrite);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_TRUE(reg->handle.valid());
  EXPECT_EQ(reg->desc.length(), buf.size());
  EXPECT_EQ(reg->desc.num_domains(), 2u);
  EXPECT_EQ(reg->desc.transport(), TransportKind::kLibfabric);
  EXPECT_TRUE(reg->desc.domain(0).address == addrs[0]);
  EXPECT_TRUE(reg->desc.domain(1).address == addrs[1]);
  Result<MrDesc> desc_back = MrDesc::from_bytes(reg->desc.to_bytes());
  ASSERT_TRUE(desc_back.ok());
  EXPECT_TRUE(*desc_back == reg->desc);
  EXPECT_EQ(e.register_memory(nullptr, 10, Access::kRemoteWrite).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.register_memory(buf.data(), 0, Access::kRemoteWrite).status().code(), ErrorCode::kInvalidArgument);

  CompletionCounter pending;
  ASSERT_TRUE(e.imms().expect(4242, 1, Completion::counter(pending)).ok());

  ASSERT_TRUE(e.stop().ok());
  EXPECT_TRUE(e.stopped());
  EXPECT_EQ(pending.errors.load(), 1u) << "a pending expectation must end (Cancelled) at stop()";
  EXPECT_EQ(pending.done.load(), 0u);
  ASSERT_TRUE(e.stop().ok());  // idempotent
  EXPECT_TRUE(e.stopped());
  EXPECT_EQ(pending.finished(), 1u) << "ended exactly once";

  // Every submit after stop() is refused with Stopped and reports nothing to its sink.
  CompletionCounter after;
  WriteRequest w;
  w.src = reg->handle;
  w.dst = reg->desc;
  w.length = 16;
  EXPECT_EQ(e.submit_write(w, Completion::counter(after)).status().code(), ErrorCode::kStopped);
  EXPECT_EQ(e.submit_imm(1, reg->desc, Completion::counter(after)).status().code(), ErrorCode::kStopped);
  const std::vector<uint8_t> msg = {1, 2, 3};
  EXPECT_EQ(e.submit_send(main, msg, Completion::counter(after)).status().code(), ErrorCode::kStopped);
  PagedWriteRequest p;
  p.src = reg->handle;
  p.dst = reg->desc;
  p.page_length = 16;
  p.src_pages = {0};
  p.dst_pages = {0};
  EXPECT_EQ(e.submit_paged_writes(p, Completion::counter(after)).status().code(), ErrorCode::kStopped);
  ScatterRequest s;
  s.src = reg->handle;
  s.targets.push_back({16, 0, 0, reg->desc, 0});
  EXPECT_EQ(e.submit_scatter(s, Completion::counter(after)).status().code(), ErrorCode::kStopped);
  const std::vector<MrDesc> peers = {reg->desc};
  EXPECT_EQ(e.submit_barrier(1, peers, Completion::counter(after)).status().code(), ErrorCode::kStopped);
  EXPECT_EQ(e.register_memory(buf.data(), buf.size(), Access::kRemoteWrite).status().code(), ErrorCode::kStopped);
  EXPECT_EQ(e.post_recvs(1, 64, [](std::span<const uint8_t>) {}).code(), ErrorCode::kStopped);
  EXPECT_EQ(e.add_peer_group(peers).status().code(), ErrorCode::kStopped);
  EXPECT_EQ(e.imms().expect(1, 1, Completion::counter(after)).code(), ErrorCode::kStopped);
  EXPECT_EQ(after.finished(), 0u);
}

// Pinning a worker to an existing CPU, and several groups, build fine.
TEST_F(BuilderTest, ValidPinnedMultiGroupBuild) {
  Result<std::unique_ptr<TransferEngine>> built = good().groups(2).pin_worker(0, 0).pin_worker(1, 0).build();
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  EXPECT_EQ((*built)->num_groups(), 2u);
  EXPECT_EQ((*built)->num_domains(), 1u);
  EXPECT_EQ((*built)->domain_addresses(1).size(), 1u);
  EXPECT_FALSE((*built)->domain_addresses(0)[0] == (*built)->domain_addresses(1)[0]);
  EXPECT_TRUE((*built)->stop().ok());
}

// A builder is a value: copies record settings independently.
TEST_F(BuilderTest, CopiesAreIndependent) {
  TransferEngineBuilder a = good();
  TransferEngineBuilder b = a;
  b.domains_per_group(0);
  TransferEngineBuilder c;
  c = b;
  c.domains_per_group(1).groups(0);
  EXPECT_EQ(code_of(b), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of(c), ErrorCode::kInvalidArgument);
  a.max_message_bytes(0);  // only a is broken now: b's error must still be the domain count
  Result<std::unique_ptr<TransferEngine>> rb = b.build();
  ASSERT_FALSE(rb.ok());
  EXPECT_NE(rb.status().message().find("domains_per_group"), std::string::npos) << rb.status().message();
  Result<std::unique_ptr<TransferEngine>> ra = a.build();
  ASSERT_FALSE(ra.ok());
  EXPECT_NE(ra.status().message().find("max_message_bytes"), std::string::npos) << ra.status().message();
}

}  // namespace
}  // namespace fabric_lib
