// The check every import of tuned entries passes before anything is written: an export
// file is foreign input, and an entry that the store takes is served as an EXACT answer.
//
// `ktune cache import` calls it, and any other importer must: the store checks only what it
// can without the templates (complete keys, cubins matching their own sha256), which a
// forged file satisfies. Pure function of its arguments; thread-safe.
#ifndef KTUNE_SERVER_TUNING_IMPORT_CHECK_H_
#define KTUNE_SERVER_TUNING_IMPORT_CHECK_H_

#include <vector>

#include "absl/status/status.h"
#include "server/store/export_file.h"
#include "server/store/store.h"
#include "server/templates/registry.h"

namespace ktune {

// Checks every field of every entry of `file` against `registry` and the device rows (the
// file's, else `known_devices`, the target store's): a known template, one of its dtypes, a
// canonical shape of exactly its dims within their bounds, params among their values, knobs
// among the template's choices for the device's target, finite positive times and
// non-negative counts, a cubin that is an ELF file holding every launch's kernel, launches
// with positive geometry naming the manifest's args. Returns OK iff the whole file may be
// imported; otherwise kInvalidArgument naming the first bad entry (index and key) and the
// field, e.g. "entries[2] (rmsnorm/f16/tokens=16 on NVIDIA H200|...): metrics.time_ns: -1 is
// not a finite positive time". Text from the file is echoed escaped and truncated.
absl::Status CheckImportFile(const TemplateRegistry& registry,
                             const std::vector<store::Device>& known_devices,
                             const store::ExportFile& file);

}  // namespace ktune

#endif  // KTUNE_SERVER_TUNING_IMPORT_CHECK_H_
