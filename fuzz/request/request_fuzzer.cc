// Fuzzes the checks at the service's edge (frontends/ktuned/request_validation.h) on every
// GetKernelRequest and TuneRequest the input can be read as (protobuf text format, which the
// seeds use, and the wire format), against the shipped templates, once compile-only and
// once with one GPU of 80 GiB.
#include <google/protobuf/text_format.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "frontends/ktuned/request_validation.h"
#include "fuzz/fuzz_support.h"

namespace {

// Validates `request` in both contexts.
template <typename Request, typename Validate>
void Check(const Request& request, Validate validate) {
  static const ktune::ValidationContext* contexts = [] {
    auto* c = new ktune::ValidationContext[2];
    c[0].registry = c[1].registry = &ktune::fuzz::ShippedRegistry();
    ktune::v1::DeviceInfo gpu;
    gpu.set_name("NVIDIA H100 80GB HBM3");
    gpu.set_cc_major(9);
    gpu.set_sm_count(132);
    gpu.set_total_memory_bytes(int64_t{80} << 30);
    gpu.set_max_threads_per_block(1024);
    gpu.set_max_threads_per_sm(2048);
    gpu.set_max_shared_per_block_optin(227 << 10);
    gpu.set_registers_per_sm(65536);
    c[1].devices.push_back(gpu);
    return c;
  }();
  for (int i = 0; i < 2; ++i) (void)validate(request, contexts[i]);
}

template <typename Request, typename Validate>
void Each(const std::string& input, Validate validate) {
  Request text_form, wire_form;
  if (google::protobuf::TextFormat::ParseFromString(input, &text_form)) Check(text_form, validate);
  if (wire_form.ParseFromString(input)) Check(wire_form, validate);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  Each<ktune::v1::GetKernelRequest>(input, ktune::ValidateGetKernel);
  Each<ktune::v1::TuneRequest>(input, [](const ktune::v1::TuneRequest& r,
                                         const ktune::ValidationContext& ctx) {
    (void)ktune::TuneSearchSettings(r);
    return ktune::ValidateTune(r, ctx);
  });
  return 0;
}
