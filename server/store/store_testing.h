// Test-only access to a store file's SQL, so tests can damage or hand-craft a file (flip a
// cubin, set a foreign user_version, fill an old-schema file) without calling SQLite
// themselves. Production code never calls it.
//
// Thread-safe: each call opens and closes its own connection, and waits for other
// connections' locks like any writer.
#ifndef KTUNE_SERVER_STORE_STORE_TESTING_H_
#define KTUNE_SERVER_STORE_STORE_TESTING_H_

#include <string>

#include "absl/status/status.h"

namespace ktune::store {

// Runs the statements of `sql` on the SQLite file at `path`, creating it if missing, with
// no schema checks and no migration.
absl::Status ExecSqlForTesting(const std::string& path, const std::string& sql);

}  // namespace ktune::store

#endif  // KTUNE_SERVER_STORE_STORE_TESTING_H_
