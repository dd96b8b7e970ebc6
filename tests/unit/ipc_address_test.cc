// ipc addresses and process identity: round trips, every truncation, garbage and mutations
// (decoding bytes from other processes never crashes and rejects what is malformed), and the
// clear rejection of peers on another host or in another PID namespace.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "transport/ipc/ipc_address.h"

namespace fabric_lib::transport::ipc {
namespace {

IpcAddress sample() {
  IpcAddress a;
  a.owner = *self_identity();
  a.nonce = 0x1122334455667788ull;
  a.segment_name = "fabric-lib-nvl-123-456-0-deadbeef";
  return a;
}

TEST(IpcIdentity, BootIdParsesAndPrints) {
  Result<BootId> id = parse_boot_id("be44a2a9-0099-4d52-ada8-2554b0f00892\n");
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(boot_id_text(*id), "be44a2a9-0099-4d52-ada8-2554b0f00892");
  for (const char* bad : {"", "be44a2a9", "be44a2a9-0099-4d52-ada8-2554b0f0089", "zz44a2a9-0099-4d52-ada8-2554b0f00892",
                          "be44a2a9-0099-4d52-ada8-2554b0f008920"}) {
    EXPECT_EQ(parse_boot_id(bad).status().code(), ErrorCode::kMalformed) << bad;
  }
}

TEST(IpcIdentity, SelfIsAliveAndAnExitedChildIsNot) {
  Result<ProcessIdentity> self = self_identity();
  ASSERT_TRUE(self.ok()) << self.status().to_string();
  EXPECT_EQ(self->pid, static_cast<uint32_t>(getpid()));
  EXPECT_TRUE(process_alive(self->pid, self->start_time));
  EXPECT_FALSE(process_alive(self->pid, self->start_time + 1)) << "a different start time is another process";
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  // A zombie (exited, not yet reaped) counts as gone already.
  for (int i = 0; i < 1000 && process_start_time(static_cast<uint32_t>(child)).ok(); ++i) usleep(1000);
  EXPECT_FALSE(process_start_time(static_cast<uint32_t>(child)).ok());
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(process_start_time(static_cast<uint32_t>(child)).ok());
}

TEST(IpcAddress, RoundTrips) {
  const IpcAddress a = sample();
  const std::vector<uint8_t> bytes = a.encode();
  Result<IpcAddress> b = IpcAddress::decode(bytes);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->owner.boot_id, a.owner.boot_id);
  EXPECT_EQ(b->owner.pid_namespace, a.owner.pid_namespace);
  EXPECT_EQ(b->owner.pid, a.owner.pid);
  EXPECT_EQ(b->owner.start_time, a.owner.start_time);
  EXPECT_EQ(b->nonce, a.nonce);
  EXPECT_EQ(b->segment_name, a.segment_name);
  EXPECT_LE(bytes.size(), 256u) << "fits kMaxDomainAddressBytes";
  EXPECT_TRUE(check_reachable(*b, *self_identity()).ok());
}

TEST(IpcAddress, EveryTruncationAndTrailingByteIsMalformed) {
  const std::vector<uint8_t> bytes = sample().encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(IpcAddress::decode(std::span(bytes.data(), n)).status().code(), ErrorCode::kMalformed) << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(IpcAddress::decode(longer).status().code(), ErrorCode::kMalformed);
}

TEST(IpcAddress, BadFieldsAreRejected) {
  auto with = [](auto mutate) {
    IpcAddress a = sample();
    mutate(a);
    return IpcAddress::decode(a.encode()).status().code();
  };
  EXPECT_EQ(with([](IpcAddress& a) { a.segment_name = ""; }), ErrorCode::kMalformed);
  EXPECT_EQ(with([](IpcAddress& a) { a.segment_name = "../etc/passwd"; }), ErrorCode::kMalformed);
  EXPECT_EQ(with([](IpcAddress& a) { a.segment_name = "a b"; }), ErrorCode::kMalformed);
  EXPECT_EQ(with([](IpcAddress& a) { a.segment_name = ".."; }), ErrorCode::kMalformed);
  EXPECT_EQ(with([](IpcAddress& a) { a.segment_name = std::string(kMaxSegmentNameBytes + 1, 'x'); }),
            ErrorCode::kMalformed);
  EXPECT_EQ(with([](IpcAddress& a) { a.owner.pid = 0; }), ErrorCode::kMalformed);
  std::vector<uint8_t> bytes = sample().encode();
  bytes[4] = 9;  // version
  EXPECT_EQ(IpcAddress::decode(bytes).status().code(), ErrorCode::kMalformed);
  bytes = sample().encode();
  bytes[0] = 'X';  // magic: e.g. a libfabric address
  Status s = IpcAddress::decode(bytes).status();
  EXPECT_EQ(s.code(), ErrorCode::kMalformed);
  EXPECT_NE(s.message().find("another transport"), std::string::npos) << s.message();
}

TEST(IpcAddress, GarbageAndMutationsNeverCrash) {
  std::mt19937_64 rng(7);
  const std::vector<uint8_t> good = sample().encode();
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b = good;
    if (i % 2) {
      b.resize(rng() % 200);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
    } else {
      for (int k = 0; k < 1 + i % 4; ++k) b[rng() % b.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    Result<IpcAddress> r = IpcAddress::decode(b);
    if (r.ok()) {
      EXPECT_TRUE(valid_segment_name(r->segment_name));
    }
  }
}

TEST(IpcAddress, AnotherHostOrPidNamespaceIsRejectedClearly) {
  const ProcessIdentity self = *self_identity();
  IpcAddress other_host = sample();
  other_host.owner.boot_id[0] ^= 1;
  Status s = check_reachable(other_host, self);
  EXPECT_EQ(s.code(), ErrorCode::kPeerUnreachable);
  EXPECT_NE(s.message().find("another host"), std::string::npos) << s.message();
  IpcAddress other_ns = sample();
  other_ns.owner.pid_namespace += 1;
  s = check_reachable(other_ns, self);
  EXPECT_EQ(s.code(), ErrorCode::kPeerUnreachable);
  EXPECT_NE(s.message().find("PID namespace"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fabric_lib::transport::ipc
