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
// provider errno — and tcp ends every WR still queued on a connection it shut down with
// FI_ECANCELED, whose provider errno is whatever errno the provider's thread last held (seen:
// ENOENT, on the 16-core GPU machine, a decoder killed with WRs in flight). The engine never
// cancels a WR through the provider (no fi_cancel), so there FI_ECANCELED means the connection.
inline bool is_connection_error(int err, int prov_errno, bool socket_provider) {
  if (is_connection_errno(err)) return true;
  return socket_provider && (err == ECANCELED || is_connection_errno(prov_errno));
}

}  // namespace fabric_lib::transport::libfabric
