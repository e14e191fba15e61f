#include "frontends/ktuned/tls_pairing.h"

namespace ktune {

TlsMisfit CheckTlsPairing(bool unix_socket, bool cert, bool key, bool client_ca) {
  if (unix_socket && (cert || key || client_ca)) return TlsMisfit::kUnixSocket;
  if (cert != key) return TlsMisfit::kHalfPair;
  if (client_ca && !cert) return TlsMisfit::kClientCaAlone;
  return TlsMisfit::kNone;
}

}  // namespace ktune
