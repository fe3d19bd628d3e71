// A durable store's log record (server/log_record.h) from a damaged data dir: a decoded record
// names only bytes inside the value, its floats are whole, and encoding the record again and
// appending its floats gives a value that decodes to the same record and floats.
#include <cstdint>
#include <string>
#include <string_view>

#include "server/log_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  hetps::proto::LogRecord record;
  std::string_view floats;
  if (!hetps::DecodeLogRecord(value, record, floats).ok()) return 0;
  if (floats.size() % sizeof(float) != 0 || floats.data() < value.data() ||
      floats.data() + floats.size() != value.data() + value.size()) {
    __builtin_trap();
  }
  const std::string again = hetps::EncodeLogPrefix(record) + std::string(floats);
  hetps::proto::LogRecord round_trip;
  std::string_view floats_again;
  if (!hetps::DecodeLogRecord(again, round_trip, floats_again).ok()) __builtin_trap();
  if (floats_again != floats || round_trip.SerializeAsString() != record.SerializeAsString()) {
    __builtin_trap();
  }
  return 0;
}
