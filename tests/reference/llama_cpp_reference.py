"""Logits from llama.cpp itself on a GGUF file, through the cyllama wheel (a Cython binding with
llama.cpp built in, manylinux2014: loads on glibc 2.17+; scripts/setup.sh installs it).

Tokens are decoded one at a time through llama.cpp's KV cache, so every position's logits come
from llama_get_logits after its own llama_decode. The KV cache is kept in F32 (llama.cpp's
default is F16) so that the comparison measures the weights' type, not the cache's.
"""
import numpy as np

GGML_TYPE_F32 = 0


def _model_class():
    import cyllama.llama.llama_cpp as cy

    class Model(cy.LlamaModel):
        # cyllama 0.2.18's LlamaContext.get_logits reads model.n_vocab, which its LlamaModel lacks.
        @property
        def n_vocab(self):
            return self.get_vocab().n_vocab

    return cy, Model


def llama_cpp_logits(path, tokens, n_threads=2):
    """(len(tokens), n_vocab) float32 logits of llama.cpp for the token sequence."""
    cy, Model = _model_class()
    cy.disable_logging()
    model_params = cy.LlamaModelParams()
    model_params.n_gpu_layers = 0
    model = Model(str(path), model_params)
    params = cy.LlamaContextParams()
    params.n_ctx = max(16, len(tokens))
    params.n_batch = params.n_ubatch = params.n_ctx
    params.n_threads = params.n_threads_batch = n_threads
    params.type_k = params.type_v = GGML_TYPE_F32
    context = cy.LlamaContext(model, params)
    rows = []
    for position, token in enumerate(tokens):
        batch = cy.LlamaBatch(n_tokens=1, embd=0, n_seq_max=1)
        batch.add(token, position, [0], True)
        context.decode(batch)
        rows.append(np.array(context.get_logits(), np.float32))
    return np.stack(rows)


def llama_cpp_tokenize(path, text, add_special=True):
    """llama.cpp's tokenization of `text` with the GGUF file's vocabulary."""
    cy, Model = _model_class()
    cy.disable_logging()
    params = cy.LlamaModelParams()
    params.n_gpu_layers = 0  # the whole model: llama.cpp aborts on vocab_only for these files
    model = Model(str(path), params)
    return list(model.get_vocab().tokenize(text, add_special, True))


# llama_ftype values of the mixes the GGUF export writes (llama.h).
LLAMA_FTYPES = {"Q4_0": 2, "Q5_0": 8, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}


def llama_quantize(source, destination, label, n_threads=1):
    """llama.cpp's llama_model_quantize (no importance matrix, default parameters) of `source`."""
    import cyllama.llama.llama_cpp as cy
    cy.disable_logging()
    params = cy.LlamaModelQuantizeParams()
    params.ftype = LLAMA_FTYPES[label]
    params.nthread = n_threads
    cy.model_quantize(str(source), str(destination), params)
