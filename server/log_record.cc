#include "server/log_record.h"

#include <fmt/format.h>

namespace hetps {
namespace {

void PutBigEndian(std::string& key, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) key.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

constexpr size_t kLogKeyBytes = 1 + 4 + 8;
constexpr size_t kPrefixBytes = 4;

}  // namespace

std::string CheckpointKey(int32_t pid) {
  std::string key = "c";
  PutBigEndian(key, static_cast<uint32_t>(pid), 4);
  return key;
}

std::string LogKey(int32_t pid, uint64_t lsn) {
  std::string key = "l";
  PutBigEndian(key, static_cast<uint32_t>(pid), 4);
  PutBigEndian(key, lsn, 8);
  return key;
}

std::optional<uint64_t> LsnOf(std::string_view key) {
  if (key.size() != kLogKeyBytes || key[0] != 'l') return std::nullopt;
  uint64_t lsn = 0;
  for (size_t i = 5; i < kLogKeyBytes; ++i) lsn = (lsn << 8) | static_cast<uint8_t>(key[i]);
  return lsn;
}

std::string EncodeLogPrefix(const proto::LogRecord& record) {
  // The record is serialized after the room for its length, into one string (this runs once
  // per logged update).
  std::string out(kPrefixBytes, '\0');
  record.AppendToString(&out);
  const uint32_t length = static_cast<uint32_t>(out.size() - kPrefixBytes);
  for (size_t i = 0; i < kPrefixBytes; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out;
}

Status DecodeLogRecord(std::string_view value, proto::LogRecord& record, std::string_view& values) {
  if (value.size() < kPrefixBytes) {
    return Status::Malformed(fmt::format("a log record of {} bytes has no length", value.size()));
  }
  uint64_t length = 0;
  for (size_t i = 0; i < kPrefixBytes; ++i) {
    length |= static_cast<uint64_t>(static_cast<uint8_t>(value[i])) << (8 * i);
  }
  const size_t rest = value.size() - kPrefixBytes;
  if (length > rest) {
    return Status::Malformed(
        fmt::format("a log record's header of {} bytes runs past its {} bytes", length, rest));
  }
  if ((rest - length) % sizeof(float) != 0) {
    return Status::Malformed(
        fmt::format("a log record's values of {} bytes are not whole floats", rest - length));
  }
  if (!record.ParseFromArray(value.data() + kPrefixBytes, static_cast<int>(length))) {
    return Status::Malformed("a log record's header does not parse");
  }
  values = value.substr(kPrefixBytes + length);
  return Status();
}

}  // namespace hetps
