// Which failed completions condemn a peer's path (src/transport/libfabric/completion_error.h).
#include <cerrno>

#include <gtest/gtest.h>

#include "transport/libfabric/completion_error.h"

namespace fabric_lib::transport::libfabric {
namespace {

TEST(CompletionError, ConnectionErrnosCondemnThePathOnEveryProvider) {
  for (const int e : {ECONNREFUSED, ECONNRESET, ENOTCONN, EPIPE, ETIMEDOUT, EHOSTUNREACH, ESHUTDOWN}) {
    EXPECT_TRUE(is_connection_error(e, 0, false)) << e;
    EXPECT_TRUE(is_connection_error(e, 0, true)) << e;
  }
}

TEST(CompletionError, ASocketProvidersErrnoCountsOnlyThere) {
  EXPECT_TRUE(is_connection_error(EIO, ENOTCONN, true));
  EXPECT_FALSE(is_connection_error(EIO, ENOTCONN, false));  // a NIC provider's own code, not an errno
}

// tcp reports a write the target refused and a write cut off by a dead peer alike (FI_ECANCELED,
// provider errno ENOENT): a refused write must not condemn a healthy peer, so neither does.
TEST(CompletionError, ASocketProvidersCancelledWriteFailsOnlyItself) {
  EXPECT_FALSE(is_connection_error(ECANCELED, ENOENT, true));
  EXPECT_FALSE(is_connection_error(ECANCELED, 0, true));
  EXPECT_TRUE(is_connection_error(ECANCELED, ENOTCONN, true));  // with a connection errno it does
}

TEST(CompletionError, OtherErrorsFailOnlyTheirOperation) {
  for (const bool socket : {false, true}) {
    EXPECT_FALSE(is_connection_error(EACCES, 0, socket));   // a bad key or range at the target
    EXPECT_FALSE(is_connection_error(EINVAL, ENOENT, socket));
    EXPECT_FALSE(is_connection_error(EIO, 0, socket));
  }
}

}  // namespace
}  // namespace fabric_lib::transport::libfabric
