// A request message that reaches its handler whether or not its bytes parsed.
//
// gRPC's generated callback handlers deserialize the request before any handler runs, and
// answer bytes that do not parse with UNIMPLEMENTED and an empty message themselves: the
// caller learns nothing, and the token check, which is in the handlers, never runs. A
// handler registered for Parsed<Request> instead gets every call and answers a bad request
// itself (KtuneServiceImpl: UNAUTHENTICATED without the token, else INVALID_ARGUMENT).
#ifndef KTUNE_SERVER_SERVICE_PARSED_REQUEST_H_
#define KTUNE_SERVER_SERVICE_PARSED_REQUEST_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/serialization_traits.h>

namespace ktune {

template <class Message>
struct Parsed {
  Message message;
  // False when the bytes did not parse as Message, or the call carried no message at all;
  // `message` is then partial or empty and must not be used.
  bool ok = false;
};

}  // namespace ktune

namespace grpc {

// Deserializing never fails: whether the bytes parsed is Parsed::ok. Only the server reads
// these (a request type); nothing serializes one.
template <class Message>
class SerializationTraits<ktune::Parsed<Message>, void> {
 public:
  static Status Deserialize(ByteBuffer* buffer, ktune::Parsed<Message>* request) {
    request->ok = SerializationTraits<Message>::Deserialize(buffer, &request->message).ok();
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // KTUNE_SERVER_SERVICE_PARSED_REQUEST_H_
