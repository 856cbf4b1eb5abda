// tensor_io's copies out of a mapped checkpoint and streamed saves: copy_weight fills a model
// tensor a block of rows at a time (any block size, dtype conversion, scalars and empty tensors)
// with weight_view's checks, and save_tensors_streamed writes save_tensors' file making one
// tensor at a time, refusing values that differ from what was declared.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../test_support.h"
#include "finetune/weights/tensor_io.h"

namespace finetune {
namespace {

using testing::error_message;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A model directory whose model.safetensors holds `tensors`.
void write_checkpoint(const testing::TempDir& dir, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  save_tensors(dir.file("model.safetensors"), tensors, {{"format", "pt"}});
}

TEST(CopyWeight, EveryBlockSizeCopiesTheSameValues) {
  testing::TempDir dir;
  const auto weight = at::randn({37, 12}).to(at::kBFloat16);  // (rows, row_length)
  const auto norm = at::randn({12}).to(at::kBFloat16);
  const auto scalar = at::randn({}).to(at::kBFloat16);
  const auto empty = at::zeros({0, 5}, at::kBFloat16);
  write_checkpoint(dir, {{"w", weight}, {"norm", norm}, {"scalar", scalar}, {"empty", empty}});
  const auto files = CheckpointFiles::open_dir(dir.str());
  for (int64_t block_bytes : {int64_t{1}, int64_t{24}, int64_t{24 * 5}, int64_t{1000}, kWeightCopyBlockBytes}) {
    SCOPED_TRACE("block_bytes " + std::to_string(block_bytes));
    for (const auto dtype : {at::kBFloat16, at::kFloat}) {
      auto target = at::empty({37, 12}, dtype);
      copy_weight(target, files, "w", block_bytes);
      EXPECT_TRUE(at::equal(target, weight.to(dtype)));
    }
    auto norm_target = at::empty({12}, at::kFloat);
    copy_weight(norm_target, files, "norm", block_bytes);
    EXPECT_TRUE(at::equal(norm_target, norm.to(at::kFloat)));
    auto scalar_target = at::empty({}, at::kFloat);
    copy_weight(scalar_target, files, "scalar", block_bytes);
    EXPECT_TRUE(at::equal(scalar_target, scalar.to(at::kFloat)));
    auto empty_target = at::empty({0, 5}, at::kFloat);
    copy_weight(empty_target, files, "empty", block_bytes);
  }
  // A copy into rows of a larger tensor (an expert's piece of a stack) leaves the others alone.
  auto stack = at::zeros({2, 40, 12}, at::kBFloat16);
  copy_weight(stack[1].narrow(0, 3, 37), files, "w", 100);
  EXPECT_TRUE(at::equal(stack[1].narrow(0, 3, 37), weight));
  EXPECT_EQ(stack[0].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(stack[1].narrow(0, 0, 3).abs().sum().item<float>(), 0.0f);
}

TEST(CopyWeight, ChecksAsWeightViewDoes) {
  testing::TempDir dir;
  write_checkpoint(dir, {{"w", at::ones({4, 3})}, {"ids", at::ones({4}, at::kLong)}});
  const auto files = CheckpointFiles::open_dir(dir.str());
  auto wrong_shape = at::empty({3, 4});
  EXPECT_NE(error_message([&] { copy_weight(wrong_shape, files, "w"); }).find("'w' has shape [4, 3]"), std::string::npos);
  auto missing = at::empty({4, 3});
  EXPECT_NE(error_message([&] { copy_weight(missing, files, "v"); }).find("missing tensor 'v'"), std::string::npos);
  auto ids = at::empty({4});
  EXPECT_NE(error_message([&] { copy_weight(ids, files, "ids"); }).find("not a floating-point"), std::string::npos);
}

TEST(SaveTensorsStreamed, WritesSaveTensorsFileMakingOneTensorAtATime) {
  testing::TempDir dir;
  const std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"b", at::randn({3, 4}).to(at::kBFloat16)}, {"a", at::randn({5})}, {"c", at::arange(6, at::kByte).view({2, 3})}};
  save_tensors(dir.file("whole.safetensors"), tensors, {{"format", "pt"}});
  std::vector<std::string> made;
  std::vector<TensorToSave> to_save;
  for (const auto& [name, tensor] : tensors) {
    to_save.push_back({name, tensor.scalar_type(), tensor.sizes().vec(), [&made, name = name, tensor = tensor] {
                         made.push_back(name);
                         return tensor.t().contiguous().t();  // not contiguous: saved as its values
                       }});
  }
  save_tensors_streamed(dir.file("streamed.safetensors"), to_save, {{"format", "pt"}});
  EXPECT_EQ(file_bytes(dir.file("streamed.safetensors")), file_bytes(dir.file("whole.safetensors")));
  EXPECT_EQ(made, (std::vector<std::string>{"a", "b", "c"}));  // the data section's order
}

TEST(SaveTensorsStreamed, ValuesUnlikeTheirDeclarationAreAnError) {
  testing::TempDir dir;
  const std::string path = dir.file("x.safetensors");
  const std::vector<TensorToSave> wrong_shape = {{"w", at::kFloat, {2, 3}, [] { return at::zeros({3, 2}); }}};
  const auto message = error_message([&] { save_tensors_streamed(path, wrong_shape); });
  EXPECT_NE(message.find(path + ": w: made as Float [3, 2], declared Float [2, 3]"), std::string::npos) << message;
  const std::vector<TensorToSave> wrong_dtype = {{"w", at::kBFloat16, {2}, [] { return at::zeros({2}); }}};
  EXPECT_NE(error_message([&] { save_tensors_streamed(path, wrong_dtype); }).find("declared BFloat16"), std::string::npos);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace finetune
