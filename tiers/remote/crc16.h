// Redis Cluster key hashing: CRC16 (XMODEM, as in the cluster spec) and the
// key -> slot mapping with hash tags, so keys sharing a `{tag}` share a node.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace kvtier::tiers::remote {

// Redis Cluster's hash slots: 0 .. kNumSlots-1.
inline constexpr uint32_t kNumSlots = 16384;

// CRC16-CCITT (XMODEM: polynomial 0x1021, init 0, no reflection, no final
// xor). Crc16("123456789") == 0x31C3.
uint16_t Crc16(absl::string_view data);

// The slot of `key` as the cluster spec computes it: when the key holds a '{'
// followed later by a '}' with at least one byte between the first '{' and
// the first '}' after it, only those bytes are hashed; otherwise the whole key.
uint16_t KeySlot(absl::string_view key);

// The part of `key` that KeySlot hashes (the tag, or the whole key).
absl::string_view HashTag(absl::string_view key);

}  // namespace kvtier::tiers::remote
