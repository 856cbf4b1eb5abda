"""Token lengths of alpaca-cleaned rows as a user's SFT run sees them, and their log-normal fit
(issue 25, item 5: bench/simulate_step_planning.py's alpaca distribution).

Each row is formatted as `finetune --dataset yahma/alpaca-cleaned` formats it (unsloth-cli.py's
Alpaca prompt, then the output) and tokenized with the Llama-3 tokenizer, plus BOS and EOS. Writes the lengths (a JSON list) and prints the fit: median exp(mean log length), sigma the
standard deviation of the log lengths.

Inputs, neither of which the hub or PyPI hands out here:
  ROWS       alpaca-cleaned rows as JSON (a list of {instruction, input, output}); the copy used for
             bench/alpaca_cleaned_lengths.json is the first 1,000 rows of yahma/alpaca-cleaned as
             vendored in github.com/makhweeb/text-ngnr (alpaca_data_cleaned.json, blob 04fbd632)
  TOKENIZER  Llama-3's tiktoken BPE file (github.com/meta-llama/llama-models,
             models/llama3/tokenizer.model, blob f0a0ce5f)
usage: python3 bench/alpaca_lengths.py ROWS TOKENIZER OUT.json   (needs tiktoken)
"""
import json
import math
import statistics
import sys

# Llama-3's pre-tokenizer pattern (llama-models, models/llama3/tokenizer.py).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
# finetune's alpaca rows (src/data/dataset_formats.cpp, alpaca_prompt): unsloth-cli.py's literal,
# its four-space indentation included, then the output.
ALPACA_PROMPT = ("Below is an instruction that describes a task, paired with an input that provides further context. "
                 "Write a response that appropriately completes the request.\n\n    ### Instruction:\n    {}"
                 "\n\n    ### Input:\n    {}\n\n    ### Response:\n    {}")


def main():
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    rows_path, tokenizer_path, out_path = sys.argv[1:4]
    encoding = tiktoken.Encoding("llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=load_tiktoken_bpe(tokenizer_path),
                                 special_tokens={})
    rows = json.load(open(rows_path))
    bos_and_eos = 2
    lengths = [len(encoding.encode(ALPACA_PROMPT.format(row["instruction"], row["input"], row["output"]))) + bos_and_eos
               for row in rows]
    with open(out_path, "w") as f:
        json.dump(lengths, f)
    logs = [math.log(length) for length in lengths]
    print(f"{len(lengths)} rows: median {statistics.median(lengths):g}, mean {statistics.mean(lengths):.1f}, "
          f"max {max(lengths)}; log-normal fit: median {math.exp(statistics.mean(logs)):.1f}, "
          f"sigma {statistics.pstdev(logs):.3f}")


if __name__ == "__main__":
    main()
