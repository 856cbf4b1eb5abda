// TensorBoard records byte for byte against the Python reference. Each expected hex string is one
// framed record that tensorboard 2.21 wrote for the same values:
//   e = event_pb2.Event(summary=torch.utils.tensorboard.summary.scalar(tag, value))
//   e.wall_time = wall_time; e.step = step              (the file_version event: event_pb2.Event(
//   RecordWriter(buf).write(e.SerializeToString())        wall_time=..., file_version="brain.Event:2",
//   buf.getvalue().hex()                                   source_metadata=SourceMetadata(writer="finetune")))
// (tensorboard.summary.writer.record_writer.RecordWriter; torch 2.11).
#include <gtest/gtest.h>

#include <string>

#include "../test_support.h"
#include "finetune/report/event_proto.h"
#include "finetune/report/tfrecord.h"

namespace finetune {
namespace {

using testing::hex;

TEST(TensorBoardRecords, FileVersionEvent) {
  EXPECT_EQ(hex(tfrecord_frame(encode_file_version_event(1700000000.25, "finetune"))),
            "2400000000000000422b804d0900001040fc54d9411a0d627261696e2e4576656e743a32520a0a0866696e6574756e655814f74b");
}

TEST(TensorBoardRecords, ScalarEvents) {
  EXPECT_EQ(hex(tfrecord_frame(encode_scalar_event(1700000001.5, 3, "train/loss", 2.5))),
            "200000000000000029eda9500900006040fc54d94110032a130a110a0a747261696e2f6c6f737315000020403b03bfe3");
  // A two-byte varint step and a value float32 rounds (2e-4).
  EXPECT_EQ(hex(tfrecord_frame(encode_scalar_event(1763900000.123456, 300, "train/learning_rate", 2e-4))),
            "2a00000000000000ae8d91f509b4e60798be48da4110ac022a1c0a1a0a13747261696e2f6c6561726e696e675f72617465"
            "1517b7513930ae4d28");
  // A six-byte varint step; a zero simple_value is still written (it is a oneof member).
  EXPECT_EQ(hex(tfrecord_frame(encode_scalar_event(1763900000.75, int64_t{1} << 40, "eval/loss", 0.0))),
            "2400000000000000422b804d0900003098be48da41108080808080202a120a100a096576616c2f6c6f737315000000009a4671fb");
  // proto3 leaves a zero wall_time and step out.
  EXPECT_EQ(hex(tfrecord_frame(encode_scalar_event(0.0, 0, "train/epoch", 1.0 / 3.0))),
            "16000000000000004f61be282a140a120a0b747261696e2f65706f636815abaaaa3e6a92bdf2");
}

TEST(TensorBoardRecords, FrameOfEmptyData) {
  // RecordWriter(buf).write(b""): length 0, masked CRC of the eight zero length bytes, no data, and
  // the masked CRC of nothing.
  EXPECT_EQ(hex(tfrecord_frame("")), "000000000000000029039807d8ea82a2");
}

}  // namespace
}  // namespace finetune
