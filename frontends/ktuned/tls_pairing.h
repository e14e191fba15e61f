// Which TLS settings fit together, the rules written once for ktuned's flags and for
// StartKtuneServer's options: TLS is for a HOST:PORT listener (a unix socket stays
// plaintext, its 0600 file mode guards it); the server's certificate and key go together;
// client CAs (mutual TLS) need the server's own pair too. Each caller words the misfit for
// its own user (flag names or option names).
//
// Pure function; thread-safe.
#ifndef KTUNE_SERVER_SERVICE_TLS_PAIRING_H_
#define KTUNE_SERVER_SERVICE_TLS_PAIRING_H_

namespace ktune {

enum class TlsMisfit {
  kNone,
  kUnixSocket,     // some TLS setting with a unix socket listener
  kHalfPair,       // a certificate without its key, or a key without its certificate
  kClientCaAlone,  // client CAs without the server's certificate and key
};

// The first rule the settings break, in the order above; kNone when they fit (no TLS at all
// fits too). Each bool says whether that setting was given.
TlsMisfit CheckTlsPairing(bool unix_socket, bool cert, bool key, bool client_ca);

}  // namespace ktune

#endif  // KTUNE_SERVER_SERVICE_TLS_PAIRING_H_
