"""The small train-and-evaluate set-up of the evaluation/save and HF training-option tests: a tiny
Qwen2, a PEFT adapter to start from, 20 training and 7 evaluation rows, and a 6-step run's
command line."""
import reference_loop
import tiny_models


def make_train_eval_run(root):
    """(base, adapter, train, evalset) under `root`."""
    base = root / "base"
    tiny_models.make_model("qwen2", base)
    adapter = reference_loop.make_init_adapter(base, root / "adapter")
    train = root / "train.jsonl"
    evalset = root / "eval.jsonl"
    tiny_models.write_jsonl(train, tiny_models.make_tokenized_rows(20, seed=1, completion_only=True))
    tiny_models.write_jsonl(evalset, tiny_models.make_tokenized_rows(7, seed=2, completion_only=True))
    return base, adapter, train, evalset


def common(base, adapter, train, out, max_steps=6):
    return ["--model_name", base, "--dataset", train, "--init_adapter", adapter, "--output_dir", out,
            "--max_steps", max_steps, "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 1,
            "--learning_rate", 5e-3, "--dtype", "float32", "--device", "cpu", "--logging_steps", 1]
