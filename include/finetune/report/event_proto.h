// The few TensorBoard protobuf messages finetune writes, encoded by hand (no protobuf library):
// tensorboard/compat/proto/event.proto and summary.proto, as event_pb2 serializes them.
//
//   Event          wall_time double = 1, step int64 = 2, file_version string = 3,
//                  summary Summary = 5, source_metadata SourceMetadata = 10
//   SourceMetadata writer string = 1
//   Summary        repeated Value value = 1
//   Summary.Value  tag string = 1, simple_value float = 2 (in the `value` oneof)
//
// Fields go out in field-number order and proto3 scalars at their default (0, "") are left out,
// as protobuf's own serializer does, so the bytes equal event_pb2's SerializeToString().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace finetune {

// The first event of every event file: file_version "brain.Event:2" (what TensorBoard's reader
// checks) and the writer's name in source_metadata.
std::string encode_file_version_event(double wall_time, std::string_view writer);

// One scalar as torch's SummaryWriter.add_scalar writes it: an Event holding a Summary with one
// simple_value (float32, rounded to nearest from `value`).
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, double value);

}  // namespace finetune
