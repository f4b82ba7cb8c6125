// Zero-copy framing of tensor payloads in protobuf messages over gRPC.
//
// PushRequest and PullResponse carry a `bytes data` field of up to a chunk
// (4 MiB by default). Serializing that through protobuf costs two copies on
// each side; at loopback speed the copies, not the network, set the pace.
// These helpers write the message's other fields, then the payload field's
// tag and length, then the payload itself as a separate gRPC slice that
// points at the caller's buffer; and read a received message's fields while
// recording where the payload lies in the received slices, so it is copied
// once, straight into its destination. The bytes on the wire are an
// ordinary protobuf encoding: any gRPC client of ps.proto interoperates.
#ifndef STRATA_COMMON_WIRE_H_
#define STRATA_COMMON_WIRE_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "strata/v1/ps.pb.h"

namespace strata {

// `msg` (whose field `field` must be unset) followed by field `field` =
// payload[0..n). The payload is referenced, not copied: it must stay valid
// and unchanged until the call that sends the buffer has completed.
grpc::ByteBuffer SerializeWithPayload(const google::protobuf::Message& msg,
                                      int field, const void* payload, size_t n);

// As above, with the payload in a slice the buffer holds a reference to.
grpc::ByteBuffer SerializeWithPayload(const google::protobuf::Message& msg,
                                      int field, grpc::Slice payload);

// A received message whose payload has not been copied out yet.
class PayloadMessage {
 public:
  // Parses `buffer` into `msg`, all fields but `field`, whose position is
  // recorded. DATA_LOSS/INVALID_ARGUMENT on a malformed message.
  absl::Status Parse(const grpc::ByteBuffer& buffer, int field,
                     google::protobuf::Message* msg);
  bool has_payload() const { return present_; }
  size_t payload_size() const { return size_; }
  // Copies the payload to dst[0..payload_size()).
  void CopyPayload(void* dst) const { CopyPayload(dst, 0, size_); }
  // Copies payload bytes [begin, begin + n) to dst[0..n). Copies in
  // increasing order of `begin` resume where the last one ended.
  // REQUIRES: begin + n <= payload_size(); one thread at a time.
  void CopyPayload(void* dst, size_t begin, size_t n) const;

 private:
  std::vector<grpc::Slice> slices_;
  size_t offset_ = 0;
  size_t size_ = 0;
  bool present_ = false;
  // Where the last copy ended: slice `cursor_slice_`, which starts at byte
  // `cursor_start_` of the message.
  mutable size_t cursor_slice_ = 0;
  mutable size_t cursor_start_ = 0;
};

// Bytes per element of a payload in `dtype` (unspecified: fp32).
inline size_t ElementBytes(v1::DType dtype) {
  return dtype == v1::DTYPE_BF16 ? 2 : 4;
}

// A fresh gRPC-owned slice of n bytes, for responses built in place.
grpc::Slice AllocateSlice(size_t n);

}  // namespace strata

#endif  // STRATA_COMMON_WIRE_H_
