#pragma once
// Whether two protocol buffers hold the same values. Their serialized bytes are not canonical
// (map entries in any order; a field this build does not know, written by a newer one, kept as
// unknown bytes), so "the same model" or "the same policy" is decided on the fields this build
// knows, field by field.
#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>

#include <memory>

namespace hetps {

inline bool SameMessage(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  if (a.GetDescriptor() != b.GetDescriptor()) return false;
  std::unique_ptr<google::protobuf::Message> known_a(a.New()), known_b(b.New());
  known_a->CopyFrom(a);
  known_b->CopyFrom(b);
  known_a->DiscardUnknownFields();
  known_b->DiscardUnknownFields();
  return google::protobuf::util::MessageDifferencer::Equals(*known_a, *known_b);
}

}  // namespace hetps
