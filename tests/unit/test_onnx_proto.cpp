// The protobuf wire format the ONNX exporter writes (src/onnx/proto.h),
// byte for byte against the encoding guide's own examples
// (protobuf.dev/programming-guides/encoding): varints, the tag byte
// (field << 3 | wire type), negative int64 as ten bytes, little-endian
// 32-bit floats and length-delimited strings and messages.
#include <doctest/doctest.h>

#include <string>

#include "onnx/proto.h"

using ampx::impl::onnx::ProtoWriter;

namespace {

std::string bytes(std::initializer_list<unsigned> values) {
  std::string s;
  for (unsigned v : values) s.push_back(static_cast<char>(v));
  return s;
}

}  // namespace

TEST_CASE("onnx proto: varint fields as the encoding guide writes them") {
  ProtoWriter w;
  w.varint_field(1, 150);  // the guide's "08 96 01"
  CHECK(w.bytes() == bytes({0x08, 0x96, 0x01}));
  ProtoWriter big;
  big.varint_field(2, 300);  // 300 = 0b10_0101100: ac 02
  CHECK(big.bytes() == bytes({0x10, 0xac, 0x02}));
  ProtoWriter negative;
  negative.int_field(1, -1);  // int64 -1: ten bytes, all ones
  CHECK(negative.bytes() ==
        bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  ProtoWriter high;
  high.varint_field(20, 7);  // field 20: tag 160 as a two-byte varint
  CHECK(high.bytes() == bytes({0xa0, 0x01, 0x07}));
}

TEST_CASE("onnx proto: floats, strings and nested messages") {
  ProtoWriter f;
  f.float_field(2, 1.0f);  // wire type 5, 0x3f800000 little-endian
  CHECK(f.bytes() == bytes({0x15, 0x00, 0x00, 0x80, 0x3f}));
  ProtoWriter s;
  s.string_field(2, "testing");  // the guide's "12 07 74 65 73 74 69 6e 67"
  CHECK(s.bytes() == bytes({0x12, 0x07, 't', 'e', 's', 't', 'i', 'n', 'g'}));
  ProtoWriter inner;
  inner.varint_field(1, 150);
  ProtoWriter outer;
  outer.message_field(3, inner);  // the guide's "1a 03 08 96 01"
  CHECK(outer.bytes() == bytes({0x1a, 0x03, 0x08, 0x96, 0x01}));
  ProtoWriter empty;
  empty.bytes_field(9, nullptr, 0);
  CHECK(empty.bytes() == bytes({0x4a, 0x00}));
}
