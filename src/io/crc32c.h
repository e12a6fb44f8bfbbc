// crc32c.h -- CRC-32C (Castagnoli), the checksum of checkpoint files.
//
// Castagnoli's polynomial detects every burst error up to 32 bits and every
// odd number of flipped bits, and it is the CRC storage formats (iSCSI,
// ext4, Btrfs) settled on, so other tools can verify ampx files.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ampx::impl::io {

// Continues a CRC-32C over `bytes` bytes: start with crc32c_update(0, ...)
// and feed the running value back in for the following pieces.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t bytes);

inline uint32_t crc32c(const void* data, size_t bytes) { return crc32c_update(0, data, bytes); }

}  // namespace ampx::impl::io
