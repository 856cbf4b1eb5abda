"""--push_gguf --hub_path ORG/NAME and the Modelfile beside the GGUF files, end to end: `finetune export` pushes
the GGUF files and their Modelfile to the local hub server (tests/reference/mock_hub.py, which
speaks the hub's upload protocol) in one commit, and huggingface_hub reads back the same bytes;
`finetune train --save_model --save_method gguf --push_gguf` pushes what its final save wrote.
"""
import os

from conftest import last_json_line, run_finetune
import gguf_models
import tiny_models
from mock_hub import MockHub

TOKENIZERS = os.path.join(os.environ.get("FINETUNE_FIXTURES", ""), "tokenizer")
TOKEN = "hf_test_token"


def hub_env(hub, home):
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}
    for key in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        env.setdefault(key, "")
    return env


def test_push_gguf_uploads_files_and_modelfile(tmp_path):
    from huggingface_hub import snapshot_download
    model_dir = tmp_path / "qwen2"
    gguf_models.make_gguf_model("qwen2", model_dir, TOKENIZERS)
    (model_dir / "generation_config.json").write_text('{"eos_token_id": 1429, "temperature": 0.7, "top_p": 0.8}')
    out = tmp_path / "out"
    with MockHub(tmp_path / "store", tokens=(TOKEN,)) as hub:
        proc = run_finetune(["export", "--model_name", model_dir, "--save_method", "gguf", "--quantization", "q8_0,f16",
                             "--save_path", out, "--device", "cpu", "--push_gguf", "--hub_path", "me/tiny-gguf",
                             "--hub_token", TOKEN], env=hub_env(hub, tmp_path / "home"))
        assert "pushed: " in proc.stderr
        files = last_json_line(proc.stdout)["gguf_files"]
        assert [os.path.basename(f) for f in files] == ["qwen2.Q8_0.gguf", "qwen2.F16.gguf"]
        commits = [r for r in hub.requests() if r["method"] == "POST" and "/commit/" in r["path"]]
        assert len(commits) == 1
        back = snapshot_download("me/tiny-gguf", cache_dir=tmp_path / "readback", endpoint=hub.url, token=TOKEN)
    assert sorted(os.listdir(back)) == sorted(["qwen2.Q8_0.gguf", "qwen2.F16.gguf", "Modelfile"])
    for name in os.listdir(back):
        assert open(os.path.join(back, name), "rb").read() == (out / name).read_bytes(), name
    modelfile = (out / "Modelfile").read_text()
    lines = modelfile.splitlines()
    assert lines[0] == "FROM ./qwen2.Q8_0.gguf"
    if "<|im_start|>" in (model_dir / "tokenizer_config.json").read_text():
        assert lines[1].startswith('TEMPLATE """{{- if .Messages }}')  # ChatML, Ollama's chatml template
        assert 'PARAMETER stop "<|im_end|>"' in lines
    assert "PARAMETER temperature 0.7" in lines and "PARAMETER top_p 0.8" in lines
    stops = [line for line in lines if line.startswith("PARAMETER stop")]
    assert len(stops) == len(set(stops)) and stops[0] == 'PARAMETER stop "<|endoftext|>"'


def test_push_gguf_needs_a_gguf_export(tmp_path):
    model_dir = tmp_path / "qwen2"
    gguf_models.make_gguf_model("qwen2", model_dir, TOKENIZERS)
    proc = run_finetune(["export", "--model_name", model_dir, "--save_method", "merged_16bit", "--save_path",
                         tmp_path / "o", "--device", "cpu", "--push_gguf", "--hub_path", "me/x"], check=False)
    assert proc.returncode == 2 and "--push_gguf" in proc.stderr and "--save_method gguf" in proc.stderr


def test_train_push_gguf_uploads_the_final_save(tmp_path):
    """After training, the GGUF files of --save_model's export (two types, one merge) and their
    Modelfile reach the hub in one commit, byte for byte as written under --save_path."""
    from huggingface_hub import snapshot_download
    model_dir = tmp_path / "qwen2"
    gguf_models.make_gguf_model("qwen2", model_dir, TOKENIZERS)
    data = tmp_path / "train.jsonl"
    tiny_models.write_jsonl(data, tiny_models.make_tokenized_rows(8, seed=1, vocab=1000))
    saved = tmp_path / "saved"
    with MockHub(tmp_path / "store", tokens=(TOKEN,)) as hub:
        proc = run_finetune(["train", "--model_name", model_dir, "--dataset", data, "--output_dir", tmp_path / "run",
                             "--max_steps", 2, "--per_device_train_batch_size", 2, "--learning_rate", 5e-3,
                             "--report_to", "none", "--save_model", "--save_method", "gguf", "--quantization",
                             "f16,q4_k_m", "--save_path", saved, "--push_gguf", "--hub_path", "me/tuned-gguf",
                             "--hub_token", TOKEN, "--device", "cpu", "--dtype", "float32"],
                            env=hub_env(hub, tmp_path / "home"))
        assert "pushed: " in proc.stderr
        commits = [r for r in hub.requests() if r["method"] == "POST" and "/commit/" in r["path"]]
        assert len(commits) == 1
        back = snapshot_download("me/tuned-gguf", cache_dir=tmp_path / "readback", endpoint=hub.url, token=TOKEN)
    assert sorted(os.listdir(back)) == sorted(["qwen2.F16.gguf", "qwen2.Q4_K_M.gguf", "Modelfile"])
    for name in os.listdir(back):
        assert open(os.path.join(back, name), "rb").read() == (saved / name).read_bytes(), name
    assert (saved / "Modelfile").read_text().splitlines()[0] == "FROM ./qwen2.F16.gguf"
