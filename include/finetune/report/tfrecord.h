// TFRecord framing, the container of TensorBoard event files (tensorflow/core/lib/io/record_writer.cc,
// tensorboard/summary/writer/record_writer.py):
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
#pragma once

#include <string>
#include <string_view>

namespace finetune {

// One record: the 12-byte header, `data`, and the 4-byte footer.
std::string tfrecord_frame(std::string_view data);

}  // namespace finetune
