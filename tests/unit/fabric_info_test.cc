// Which fi_info the engine opens: the provider policies of src/transport/libfabric/fabric_info.h
// (delivery-complete writes except on EFA; FI_HMEM, when GPU memory on the NIC is wanted, except on
// shm), checked against this machine's libfabric.
#include <rdma/fabric.h>

#include <gtest/gtest.h>

#include "transport/libfabric/fabric_info.h"

namespace fabric_lib::transport::libfabric {
namespace {

TEST(FabricInfo, HmemIsAskedOfEveryProviderButShm) {
  EXPECT_FALSE(wants_hmem("shm"));
  EXPECT_TRUE(wants_hmem("tcp"));
  EXPECT_TRUE(wants_hmem("tcp;ofi_rxm"));
  EXPECT_TRUE(wants_hmem("efa"));
  EXPECT_TRUE(wants_hmem("verbs;ofi_rxm"));
}

// Debian's shm reports FI_HMEM when asked: with GPU memory wanted, the engine's shm endpoint must
// still come without it (it halves shm's host-memory rate, docs/providers.md).
TEST(FabricInfo, ShmEndpointOmitsHmemEvenWhenGpuMemoryIsWanted) {
  Result<FiInfoPtr> info = select_fi_info("shm", "", /*want_hmem=*/true);
  if (!info.ok()) GTEST_SKIP() << "no shm provider here: " << info.status().message();
  EXPECT_EQ((*info)->caps & FI_HMEM, 0u);
  EXPECT_EQ((*info)->domain_attr->mr_mode & FI_MR_HMEM, 0);
  EXPECT_NE((*info)->tx_attr->op_flags & FI_DELIVERY_COMPLETE, 0u) << "shm grants delivery-complete writes";
}

// tcp is asked for FI_HMEM; Debian's tcp has none, and the selection falls back to a plain endpoint.
TEST(FabricInfo, TcpWithoutHmemFallsBackToAPlainEndpoint) {
  Result<FiInfoPtr> info = select_fi_info("tcp", "", /*want_hmem=*/true);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_NE((*info)->caps & FI_RMA, 0u);
  EXPECT_NE((*info)->caps & FI_MSG, 0u);
}

}  // namespace
}  // namespace fabric_lib::transport::libfabric
