// The portable export file of `ktune cache export` / `import`: tuned entries with their
// evidence (the job that tuned each, all its trials) and the device rows they were tuned on
// (with the measured copy ceiling), to move results between hosts of one device model.
//
// JSON, so a person can read and diff it; cubins are base64. Store ids are not in it: they
// are local to a file, and an import assigns its own. Plain functions, thread-safe.
#ifndef KTUNE_SERVER_STORE_EXPORT_FILE_H_
#define KTUNE_SERVER_STORE_EXPORT_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/store/store.h"

namespace ktune::store {

// The "format" value that marks a ktune export, and the layout version this build writes.
inline constexpr absl::string_view kExportFormat = "ktune-cache-export";
inline constexpr int kExportVersion = 1;

struct ExportFile {
  int version = kExportVersion;
  int64_t exported_unix_ms = 0;
  std::vector<Device> devices;      // every device model the entries name, when known
  std::vector<EntryBundle> entries;
};

std::string ExportToJson(const ExportFile& file);

// kInvalidArgument naming `name` and the field (e.g. "entries[2].metrics.time_ns") for
// text that is not JSON, not a ktune export, or has a missing or mistyped field;
// kFailedPrecondition for a newer layout version than kExportVersion.
absl::StatusOr<ExportFile> ExportFromJson(absl::string_view json, absl::string_view name);

}  // namespace ktune::store

#endif  // KTUNE_SERVER_STORE_EXPORT_FILE_H_
