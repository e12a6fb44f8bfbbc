// proto.h -- the protobuf wire format, write side only: the few encodings
// ONNX's messages use (varints, 32-bit floats, length-delimited strings and
// nested messages), so libampx writes .onnx files without a protobuf
// library. Fields are appended in the order the caller writes them; repeated
// scalars are written unpacked, which every protobuf parser accepts for
// proto2's repeated fields (onnx.proto is proto2).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace ampx::impl::onnx {

class ProtoWriter {
 public:
  void varint_field(uint32_t field, uint64_t value) {
    tag(field, 0);
    varint(value);
  }
  // int32/int64 fields: negative values are sign-extended to 64 bits, as
  // protobuf encodes them (10 bytes).
  void int_field(uint32_t field, int64_t value) {
    varint_field(field, static_cast<uint64_t>(value));
  }
  void float_field(uint32_t field, float value) {
    tag(field, 5);
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
  void bytes_field(uint32_t field, const void* data, size_t size) {
    tag(field, 2);
    varint(size);
    if (size > 0) out_.append(static_cast<const char*>(data), size);
  }
  void string_field(uint32_t field, const std::string& s) {
    bytes_field(field, s.data(), s.size());
  }
  void message_field(uint32_t field, const ProtoWriter& message) {
    bytes_field(field, message.out_.data(), message.out_.size());
  }

  const std::string& bytes() const { return out_; }
  size_t size() const { return out_.size(); }

 private:
  void tag(uint32_t field, uint32_t wire_type) { varint((uint64_t{field} << 3) | wire_type); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }

  std::string out_;
};

}  // namespace ampx::impl::onnx
