// How an error message quotes what it was given, and how much of a long text (a compiler
// log) a status carries: a request's own bytes must not make the answer to it too big to
// send (a 100 KB template id once turned INVALID_ARGUMENT into the client's
// RESOURCE_EXHAUSTED), and a status is a summary, the whole text goes to the log.
//
// Pure functions; thread-safe.
#ifndef KTUNE_SERVER_BASE_ECHO_H_
#define KTUNE_SERVER_BASE_ECHO_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ktune {

inline constexpr size_t kMaxEchoBytes = 100;
inline constexpr size_t kMaxLogBytesInStatus = 2048;

// `input` in single quotes, C-escaped; past `max` bytes, its first `max` and its length:
// 'xxxx...' (100000 bytes).
std::string Echo(absl::string_view input, size_t max = kMaxEchoBytes);

// `text` as it is up to `max` bytes; longer, its first `max` bytes and
// "\n[... N more bytes]".
std::string Clip(absl::string_view text, size_t max = kMaxLogBytesInStatus);

}  // namespace ktune

#endif  // KTUNE_SERVER_BASE_ECHO_H_
