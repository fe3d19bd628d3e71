// The durable store's records in RocksDB (server/durable_store.h): their keys, and a log
// record's value as an encode/decode pair.
//
// Keys sort by partition, then by log sequence number (lsn): "c" + pid (4 bytes, big-endian)
// holds a partition's checkpoint, "l" + pid + lsn (8 bytes, big-endian) one of its log records.
// A log record's value is [n, 4 bytes little-endian][n bytes: proto::LogRecord][floats, raw]:
// the store writes the prefix and the caller's floats as two slices (no copy of the values),
// and DecodeLogRecord checks every length before anything is read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "durable.pb.h"

namespace hetps {

std::string CheckpointKey(int32_t pid);
std::string LogKey(int32_t pid, uint64_t lsn);
// The lsn of a log key; nullopt when `key` is not one.
std::optional<uint64_t> LsnOf(std::string_view key);

// The bytes of a log record's value before its floats.
std::string EncodeLogPrefix(const proto::LogRecord& record);
// Splits a log record's value into `record` and the bytes of its floats (`values`: a view into
// `value`, a whole number of floats, not aligned for them). Malformed: a short value, a length
// past its end, an unparsable record or a partial float.
Status DecodeLogRecord(std::string_view value, proto::LogRecord& record, std::string_view& values);

}  // namespace hetps
