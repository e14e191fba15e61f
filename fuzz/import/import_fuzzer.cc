// Fuzzes what `ktune cache import` reads before it touches a store: the export file's JSON
// (server/store/export_file.h) and the check of every entry against the shipped templates
// (server/tuning/import_check.h), with no device rows known beside the file's.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_support.h"
#include "server/store/export_file.h"
#include "server/tuning/import_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ktune::store::ExportFile> file = ktune::store::ExportFromJson(json, "fuzz.json");
  if (!file.ok()) return 0;
  (void)ktune::CheckImportFile(ktune::fuzz::ShippedRegistry(), {}, *file);
  return 0;
}
