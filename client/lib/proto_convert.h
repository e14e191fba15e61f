// The edge between ktune.v1 protos / grpc::Status and the client's plain structs and
// absl::Status. Internal to libktune_client (and its tests): its users see ktune_client.h.
//
// Pure functions; thread-safe.
#ifndef KTUNE_CLIENT_LIB_PROTO_CONVERT_H_
#define KTUNE_CLIENT_LIB_PROTO_CONVERT_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "client/lib/ktune_client.h"
#include "ktune/v1/ktune.pb.h"

namespace ktune::client {

// The same code and message (gRPC's codes are absl's, number for number); OK stays OK.
absl::Status StatusFromGrpc(const grpc::Status& status);

KernelArtifact ArtifactFromProto(const v1::KernelArtifact& proto);
TuneProgress ProgressFromProto(const v1::TuneProgress& proto);
TemplateList TemplatesFromProto(const v1::ListTemplatesResponse& proto);
DeviceList DevicesFromProto(const v1::GetDevicesResponse& proto);

v1::GetKernelRequest ToProto(const KernelRequest& request);
v1::TuneRequest ToProto(const TuneRequest& request);

}  // namespace ktune::client

#endif  // KTUNE_CLIENT_LIB_PROTO_CONVERT_H_
