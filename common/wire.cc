#include "common/wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpc/slice.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

using google::protobuf::internal::WireFormatLite;

// Reads a list of slices as one stream, without copying.
class SliceStream : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit SliceStream(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {}
  bool Next(const void** data, int* size) override {
    while (index_ < slices_.size() && pos_ == slices_[index_].size()) {
      ++index_;
      pos_ = 0;
    }
    if (index_ == slices_.size()) return false;
    *data = slices_[index_].begin() + pos_;
    *size = static_cast<int>(slices_[index_].size() - pos_);
    pos_ = slices_[index_].size();
    count_ += *size;
    return true;
  }
  void BackUp(int count) override {
    pos_ -= count;
    count_ -= count;
  }
  bool Skip(int count) override {
    const void* d;
    int s;
    while (count > 0) {
      if (!Next(&d, &s)) return false;
      if (s > count) {
        BackUp(s - count);
        return true;
      }
      count -= s;
    }
    return true;
  }
  int64_t ByteCount() const override { return count_; }

 private:
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t pos_ = 0;
  int64_t count_ = 0;
};

std::string Prefix(const google::protobuf::Message& msg, int field, size_t n) {
  std::string out = msg.SerializeAsString();
  google::protobuf::io::StringOutputStream sos(&out);
  {
    google::protobuf::io::CodedOutputStream cos(&sos);
    cos.WriteTag(WireFormatLite::MakeTag(
        field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    cos.WriteVarint64(n);
  }
  return out;
}

}  // namespace

grpc::ByteBuffer SerializeWithPayload(const google::protobuf::Message& msg,
                                      int field, const void* payload,
                                      size_t n) {
  return SerializeWithPayload(
      msg, field, grpc::Slice(payload, n, grpc::Slice::STATIC_SLICE));
}

grpc::ByteBuffer SerializeWithPayload(const google::protobuf::Message& msg,
                                      int field, grpc::Slice payload) {
  grpc::Slice slices[2] = {grpc::Slice(Prefix(msg, field, payload.size())),
                           std::move(payload)};
  return grpc::ByteBuffer(slices, 2);
}

absl::Status PayloadMessage::Parse(const grpc::ByteBuffer& buffer, int field,
                                   google::protobuf::Message* msg) {
  slices_.clear();
  present_ = false;
  cursor_slice_ = cursor_start_ = 0;
  if (!buffer.Dump(&slices_).ok())
    return absl::DataLossError("unreadable message buffer");
  SliceStream stream(slices_);
  google::protobuf::io::CodedInputStream in(&stream);
  in.SetTotalBytesLimit(INT32_MAX);
  // Every field but the payload is re-encoded here and parsed at the end:
  // they are a few bytes; the payload is only located.
  std::string rest;
  {
    google::protobuf::io::StringOutputStream sos(&rest);
    google::protobuf::io::CodedOutputStream out(&sos);
    for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
      if (WireFormatLite::GetTagFieldNumber(tag) == field &&
          WireFormatLite::GetTagWireType(tag) ==
              WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        uint64_t n = 0;
        if (!in.ReadVarint64(&n))
          return absl::InvalidArgumentError("truncated payload length");
        offset_ = static_cast<size_t>(in.CurrentPosition());
        if (n > INT32_MAX || !in.Skip(static_cast<int>(n))) {
          return absl::InvalidArgumentError(
              "payload runs past the end of the message");
        }
        size_ = n;
        present_ = true;
        continue;
      }
      if (!WireFormatLite::SkipField(&in, tag, &out)) {
        return absl::InvalidArgumentError("malformed protobuf message");
      }
    }
    if (!in.ConsumedEntireMessage())
      return absl::InvalidArgumentError("malformed protobuf message");
  }
  if (!msg->ParseFromString(rest)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed ", msg->GetTypeName()));
  }
  if (!present_) size_ = 0;
  return absl::OkStatus();
}

void PayloadMessage::CopyPayload(void* dst, size_t begin, size_t n) const {
  char* out = static_cast<char*>(dst);
  const size_t from = offset_ + begin;  // in the message
  if (from < cursor_start_) cursor_slice_ = cursor_start_ = 0;
  size_t left = n;
  for (; cursor_slice_ < slices_.size() && left > 0; ++cursor_slice_) {
    const grpc::Slice& s = slices_[cursor_slice_];
    const size_t end = cursor_start_ + s.size();
    if (from + (n - left) >= end) {
      cursor_start_ = end;
      continue;
    }
    const size_t skip = from + (n - left) - cursor_start_;
    const size_t take = std::min(s.size() - skip, left);
    std::memcpy(out, s.begin() + skip, take);
    out += take;
    left -= take;
    if (skip + take < s.size()) break;  // the next copy starts in this slice
    cursor_start_ = end;
  }
}

grpc::Slice AllocateSlice(size_t n) {
  return grpc::Slice(grpc_slice_malloc(n), grpc::Slice::STEAL_REF);
}

}  // namespace strata
