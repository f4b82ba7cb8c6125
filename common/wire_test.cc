#include "common/wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata {
namespace {

constexpr int kDataField = v1::PushRequest::kDataFieldNumber;

// A push whose encoding is cut into slices of the given sizes (the last
// takes the rest), as gRPC hands over what it read.
grpc::ByteBuffer Sliced(const std::string& payload,
                        const std::vector<size_t>& cuts,
                        v1::PushRequest* header) {
  header->set_chunk_id(7);
  header->set_step(3);
  grpc::ByteBuffer whole =
      SerializeWithPayload(*header, kDataField, payload.data(), payload.size());
  std::vector<grpc::Slice> parts;
  EXPECT_TRUE(whole.Dump(&parts).ok());
  std::string bytes;
  for (const grpc::Slice& s : parts)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + at, cut);
    at += cut;
  }
  slices.emplace_back(bytes.data() + at, bytes.size() - at);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + 7);
  return s;
}

TEST(PayloadMessage, CopiesRangesAcrossSlicesInAnyOrder) {
  const std::string payload = Pattern(1000);
  v1::PushRequest sent;
  // Slices of 3, 1, 250, 1 and 400 bytes, then the rest: ranges begin and
  // end inside slices and on their edges.
  const grpc::ByteBuffer buffer = Sliced(payload, {3, 1, 250, 1, 400}, &sent);
  PayloadMessage message;
  v1::PushRequest got;
  ASSERT_TRUE(message.Parse(buffer, kDataField, &got).ok());
  EXPECT_EQ(got.chunk_id(), 7u);
  EXPECT_EQ(got.step(), 3);
  ASSERT_EQ(message.payload_size(), payload.size());

  std::string whole(payload.size(), '\0');
  message.CopyPayload(whole.data());
  EXPECT_EQ(whole, payload);

  // In increasing order, in blocks of 64 (the last one short).
  std::string blocks(payload.size(), '\0');
  for (size_t begin = 0; begin < payload.size(); begin += 64) {
    const size_t n = std::min<size_t>(64, payload.size() - begin);
    message.CopyPayload(blocks.data() + begin, begin, n);
  }
  EXPECT_EQ(blocks, payload);

  // Backwards, and empty ranges: the cursor starts again from the front.
  std::string back(payload.size(), '\0');
  for (size_t end = payload.size(); end > 0;) {
    const size_t n = std::min<size_t>(97, end);
    message.CopyPayload(back.data() + end - n, end - n, n);
    message.CopyPayload(back.data(), end - n, 0);
    end -= n;
  }
  EXPECT_EQ(back, payload);
}

TEST(PayloadMessage, ARangeOfTheLastBytesOfOneSlice) {
  const std::string payload = Pattern(64);
  v1::PushRequest sent;
  const grpc::ByteBuffer buffer = Sliced(payload, {20}, &sent);
  PayloadMessage message;
  v1::PushRequest got;
  ASSERT_TRUE(message.Parse(buffer, kDataField, &got).ok());
  std::string tail(10, '\0');
  message.CopyPayload(tail.data(), 54, 10);
  EXPECT_EQ(tail, payload.substr(54));
  std::string head(5, '\0');
  message.CopyPayload(head.data(), 0, 5);
  EXPECT_EQ(head, payload.substr(0, 5));
}

}  // namespace
}  // namespace strata
