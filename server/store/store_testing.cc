#include "server/store/store_testing.h"

#include <memory>

#include "server/base/status_macros.h"
#include "server/store/sqlite_db.h"

namespace ktune::store {

absl::Status ExecSqlForTesting(const std::string& path, const std::string& sql) {
  KTUNE_ASSIGN_OR_RETURN(
      std::unique_ptr<internal::Db> db,
      internal::Db::Open(path, internal::OpenMode::kReadWriteCreate, /*busy_timeout_ms=*/5000));
  return db->Exec(sql);
}

}  // namespace ktune::store
