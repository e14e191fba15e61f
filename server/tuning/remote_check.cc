#include "server/tuning/remote_check.h"

#include "absl/strings/str_cat.h"
#include "server/store/export_file.h"
#include "server/tuning/import_check.h"

namespace ktune {
namespace {

absl::Status Differs(absl::string_view field, absl::string_view got, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": the record has \"", got, "\", this host asked for \"", want, "\""));
}

}  // namespace

absl::Status CheckRemoteRecord(const TemplateRegistry& registry,
                               const std::vector<store::Device>& known_devices,
                               const fleet::RemoteKey& wanted, const fleet::RemoteRecord& record) {
  const store::Entry& e = record.bundle.entry;
  const store::EntryKey& k = wanted.key;
  if (e.key.device_model != k.device_model) {
    return Differs("device model", e.key.device_model, k.device_model);
  }
  if (e.key.template_id != k.template_id) return Differs("template", e.key.template_id, k.template_id);
  if (e.key.dtype != k.dtype) return Differs("dtype", e.key.dtype, k.dtype);
  if (e.key.shape != k.shape) return Differs("shape", e.key.shape, k.shape);
  if (e.source_hash != wanted.source_hash) {
    return Differs("source_hash", e.source_hash, wanted.source_hash);
  }
  if (e.nvrtc_version != wanted.nvrtc_version) {
    return Differs("nvrtc_version", e.nvrtc_version, wanted.nvrtc_version);
  }
  if (record.device && record.device->model_key != k.device_model) {
    return Differs("device.model_key", record.device->model_key, k.device_model);
  }
  store::ExportFile file;
  if (record.device) file.devices.push_back(*record.device);
  file.entries.push_back(record.bundle);
  return CheckImportFile(registry, known_devices, file);
}

}  // namespace ktune
