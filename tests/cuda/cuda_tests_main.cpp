// finetune_cuda_tests' main: every case of tests/cuda/ runs on a GPU, so where none is visible the
// binary says so once and exits 0 (scripts/test.sh runs it only where nvidia-smi lists a GPU;
// bench/gpu_cuda_tests.sh runs it on the GPU machine). Listing the cases works anywhere.
#include <gtest/gtest.h>

#include <ATen/cuda/CUDAContext.h>

#include <iostream>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
#ifdef GTEST_FLAG_GET  // GoogleTest 1.12 and later
  const bool listing = GTEST_FLAG_GET(list_tests);
#else
  const bool listing = ::testing::GTEST_FLAG(list_tests);
#endif
  if (!listing && !at::cuda::is_available()) {
    std::cout << "finetune_cuda_tests: no CUDA device visible, no case run (each needs a GPU; run "
                 "bench/gpu_cuda_tests.sh on a GPU machine)"
              << std::endl;
    return 0;
  }
  return RUN_ALL_TESTS();
}
