// Which failed completions condemn the path to a peer (kPeerUnreachable) and which fail only their
// operation (kProviderError): LibfabricDomain::read_error's classification, apart so that the
// providers' quirks it encodes are tested without a broken connection.
#pragma once

#include <cerrno>

namespace fabric_lib::transport::libfabric {

// An errno that says the connection (or the route) to the peer is gone.
inline bool is_connection_errno(int e) {
  switch (e) {
    case ECONNREFUSED: case ECONNRESET: case ECONNABORTED: case ETIMEDOUT: case EHOSTUNREACH:
    case ENETUNREACH: case ENETDOWN: case ENOTCONN: case EPIPE: case EHOSTDOWN: case ESHUTDOWN:
      return true;
    default:
      return false;
  }
}

// `err`: fi_cq_err_entry::err (a positive FI_E* / errno); `prov_errno`: the provider's own code.
// Socket-based providers (`socket_provider`: tcp, sockets, udp) report the socket's errno as the
// provider errno. Not a connection error: FI_ECANCELED alone. tcp (libfabric 1.17) ends a write the
// target refused (bad key, bad range) and a write cut off by a peer that died both with
// FI_ECANCELED and a stale provider errno (ENOENT in both, measured): the first must fail only its
// operation (the peer is fine), so both do; a dead peer's next post fails with ENOTCONN and
// condemns the path then (docs/failure-semantics.md).
inline bool is_connection_error(int err, int prov_errno, bool socket_provider) {
  if (is_connection_errno(err)) return true;
  return socket_provider && is_connection_errno(prov_errno);
}

}  // namespace fabric_lib::transport::libfabric
