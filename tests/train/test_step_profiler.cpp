// The kernel time breakdown: categories by kernel name, totals and shares, top-kernel ordering;
// and a profiled CPU window that writes its trace and summary.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "finetune/train/step_profiler.h"

namespace finetune {
namespace {

TEST(StepProfiler, KernelCategoriesFollowKernelNames) {
  EXPECT_EQ(kernel_category("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"), "gemm");
  EXPECT_EQ(kernel_category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"), "gemm");
  EXPECT_EQ(kernel_category("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>(...)"), "gemm");
  EXPECT_EQ(kernel_category("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"), "attention");
  EXPECT_EQ(kernel_category("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"), "nccl");
  EXPECT_EQ(kernel_category("Memcpy HtoD (Pinned -> Device)"), "copy");
  EXPECT_EQ(kernel_category("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"),
            "other");
}

TEST(StepProfiler, SummaryTotalsCategoriesAndOrdersKernelsByTime) {
  const std::vector<KernelTime> kernels = {
      {"elementwise_kernel", 100, 10.0}, {"nvjet_gemm_a", 50, 60.0}, {"flash_fwd_kernel", 10, 20.0},
      {"nvjet_gemm_b", 5, 10.0}};
  const auto text = format_kernel_summary(kernels, /*wall_ms=*/200.0, /*steps=*/2, /*top=*/3);
  EXPECT_NE(text.find("2 optimizer steps, wall 200.0 ms (100.0 ms/step); device kernels 100.0 ms (50.0% of wall)"),
            std::string::npos) << text;
  EXPECT_NE(text.find("gemm               55        70.00     70.0     35.0"), std::string::npos) << text;
  EXPECT_NE(format_kernel_summary(kernels, 200.0, 2, 3, "decode steps").find("2 decode steps, wall 200.0 ms"),
            std::string::npos);
  EXPECT_NE(text.find("attention          10        20.00     20.0     10.0"), std::string::npos) << text;
  const auto a = text.find("nvjet_gemm_a"), flash = text.find("flash_fwd_kernel", text.find("top kernels"));
  EXPECT_LT(a, flash);                                          // sorted by time
  EXPECT_EQ(text.find("nvjet_gemm_b", text.find("top kernels")), std::string::npos);  // only the top 3
}

TEST(StepProfiler, ProfiledCpuWindowWritesTraceAndSummary) {
  // (No std::filesystem::remove_all here: libtorch.so exports a copy of it that crashes.)
  char dir_template[] = "/tmp/finetune_step_profiler_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path dir(dir_template);
  StepProfiler profiler(/*first_step=*/2, /*steps=*/2, dir.string(), /*rank=*/0, at::kCPU);
  for (int64_t step = 1; step <= 4; ++step) {
    profiler.before_step(step);
    auto a = at::randn({64, 64});
    auto b = at::mm(a, a);
    profiler.after_step(step);
  }
  std::ifstream summary(dir / "kernel_summary-rank0.txt");
  std::stringstream text;
  text << summary.rdbuf();
  EXPECT_NE(text.str().find("2 optimizer steps"), std::string::npos) << text.str();
  std::ifstream trace(dir / "profile-rank0.json");
  std::stringstream trace_text;
  trace_text << trace.rdbuf();
  EXPECT_NE(trace_text.str().find("aten::mm"), std::string::npos);  // host operators of the window
  for (const char* name : {"kernel_summary-rank0.txt", "profile-rank0.json"}) std::remove((dir / name).c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace finetune
