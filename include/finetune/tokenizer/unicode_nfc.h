// Unicode Normalization Form C (UAX #15), the `NFC` normalizer Qwen2/Qwen3 ship in tokenizer.json.
// Tables come from src/tokenizer/unicode_nfc_tables.inc, generated from Python's unicodedata by
// src/tokenizer/generate_nfc_tables.py (Unicode 14; the Rust crate may know newer characters, which
// only matters for code points assigned after Unicode 14).
#pragma once

#include <string>

namespace finetune {

std::string nfc_normalize(const std::string& utf8_text);

}  // namespace finetune
