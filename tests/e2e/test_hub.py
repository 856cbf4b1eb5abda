"""The hub client of the real binary against the mock hub (tests/reference/mock_hub.py, which
tests/e2e/test_mock_hub.py shows huggingface_hub itself accepts): the Unsloth guide's command shape
from an empty cache (one process, mpirun -np 2, torchrun 2), the cache tree huggingface_hub would
write, transformers loading it offline, resume with Range, every error case, and --push_model read
back by huggingface_hub."""
import json
import os
import subprocess

import pytest

from conftest import run_finetune
from ddp_launch import check_ok, run_launched
from mock_hub import MockHub, make_repo
import tiny_models

TOKEN = "hf_test_token"


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """A tiny Llama (with files finetune must not fetch) and a dataset with train/test splits."""
    root = tmp_path_factory.mktemp("hub_repos")
    model_dir = root / "tiny"
    tiny_models.make_model("llama", model_dir)
    files = {p.name: p.read_bytes() for p in model_dir.iterdir()}
    files["original/consolidated.00.pth"] = b"not for us" * 300
    files["pytorch_model.bin"] = b"legacy weights" * 100
    files["README.md"] = b"# tiny"
    rows = tiny_models.make_tokenized_rows(48, seed=3)
    lines = [json.dumps(r).encode() + b"\n" for r in rows]
    dataset = {"data/train.jsonl": b"".join(lines[:40]), "data/test.jsonl": b"".join(lines[40:]),
               "README.md": b"# rows"}
    store = root / "store"
    commits = {"model": make_repo(store, "model", "org/tiny", files),
               "dataset": make_repo(store, "dataset", "org/rows", dataset),
               "gated": make_repo(store, "model", "org/gated", files, gated=True)}
    return {"store": store, "files": files, "dataset": dataset, "commits": commits, "model_dir": model_dir}


@pytest.fixture
def hub(repos):
    with MockHub(repos["store"], tokens=(TOKEN,)) as server:
        yield server


def hub_env(hub, home, **extra):
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}
    for key in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        env.setdefault(key, "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def train_args(out, model="org/tiny", dataset="org/rows", extra=()):
    return ["--model_name", model, "--dataset", dataset, "--max_steps", 2, "--output_dir", out,
            "--per_device_train_batch_size", 2, "--logging_steps", 1] + list(extra)


def fetched(hub, path_part):
    """GETs that carried bytes of files whose path contains `path_part`."""
    return [r for r in hub.requests() if r["method"] == "GET" and path_part in r["path"] and r["status"] in (200, 206)]


def cache_tree(cache):
    """{relative path: symlink target or file bytes} of a hub cache, without .locks and without what
    huggingface_hub 1.33 keeps for itself only: CACHEDIR.TAG and trees/<commit>.json (its cache of
    the tree-listing API, which we do not call)."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(cache):
        dirnames[:] = [d for d in dirnames if d != ".locks"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, cache)
            if rel == "CACHEDIR.TAG" or "/trees/" in rel:
                continue
            tree[rel] = ("link", os.readlink(path)) if os.path.islink(path) else ("file", open(path, "rb").read())
    return tree


def test_empty_cache_downloads_only_what_is_needed_as_huggingface_hub_lays_it_out(hub, repos, tmp_path):
    from huggingface_hub import snapshot_download
    home = tmp_path / "home"
    run_finetune(train_args(tmp_path / "out"), env=hub_env(hub, home))
    ours = cache_tree(home / "hub")
    model_files = sorted(p.split("/")[-1] for p in ours if p.startswith("models--org--tiny/snapshots/"))
    assert model_files == ["config.json", "generation_config.json", "model.safetensors"]  # no .bin, .pth, README
    assert sorted(p.split("/snapshots/")[1].split("/", 1)[1] for p in ours if "datasets--org--rows/snapshots/" in p) \
        == ["data/train.jsonl"]  # the train split only
    # huggingface_hub writes the same tree, byte for byte, for the same files
    theirs_dir = tmp_path / "theirs"
    snapshot_download("org/tiny", cache_dir=theirs_dir, endpoint=hub.url, allow_patterns=model_files)
    snapshot_download("org/rows", repo_type="dataset", cache_dir=theirs_dir, endpoint=hub.url,
                      allow_patterns=["data/train.jsonl"])
    assert cache_tree(theirs_dir) == ours
    # transformers loads what we wrote, offline
    script = ("import transformers, torch, sys; m = transformers.AutoModelForCausalLM.from_pretrained('org/tiny'); "
              "ref = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1]); "
              "assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), ref.state_dict().values())); "
              "print('loaded', m.config.model_type)")
    proc = subprocess.run([os.environ.get("FINETUNE_PYTHON", "python3"), "-c", script, str(repos["model_dir"])],
                          capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(home / "hub")})
    assert proc.returncode == 0 and "loaded llama" in proc.stdout, proc.stderr[-2000:]


def test_a_second_run_downloads_nothing_and_offline_reads_the_cache_huggingface_hub_wrote(hub, repos, tmp_path):
    from huggingface_hub import snapshot_download
    home = tmp_path / "home"
    env = hub_env(hub, home)
    run_finetune(train_args(tmp_path / "a"), env=env)
    hub.log.clear()
    run_finetune(train_args(tmp_path / "b"), env=env)
    assert [r["method"] for r in hub.requests()] == ["GET", "GET"]  # the two repo infos, no file
    # a cache filled by huggingface_hub, used with HF_HUB_OFFLINE=1: no request at all
    other = tmp_path / "other"
    snapshot_download("org/tiny", cache_dir=other / "hub", endpoint=hub.url)
    snapshot_download("org/rows", repo_type="dataset", cache_dir=other / "hub", endpoint=hub.url)
    hub.log.clear()
    run_finetune(train_args(tmp_path / "c"), env=hub_env(hub, other, HF_HUB_OFFLINE=1))
    assert hub.requests() == []
    proc = run_finetune(train_args(tmp_path / "d"), check=False, env=hub_env(hub, tmp_path / "empty", HF_HUB_OFFLINE=1))
    assert proc.returncode == 1 and "--dataset org/rows not found" in proc.stderr and "HF_HUB_OFFLINE" in proc.stderr


@pytest.mark.parametrize("launcher", ["mpirun", "torchrun"])
def test_two_ranks_one_download_per_node_both_train(hub, tmp_path, launcher):
    home = tmp_path / "home"
    proc = check_ok(run_launched(launcher, 2, train_args(tmp_path / "out", extra=["--eval_dataset", "test"]),
                                 extra_env=hub_env(hub, home)), launcher)
    assert len(fetched(hub, "model.safetensors")) == 1
    assert len([r for r in hub.requests() if r["path"].startswith("/api/models/org/tiny")]) == 1
    assert "waiting for local rank 0 to fetch org/tiny, org/rows" in proc.stderr
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2 and "eval_loss" in summary


def test_a_dropped_connection_resumes_with_range(hub, repos, tmp_path):
    home = tmp_path / "home"
    hub.inject({"drop_after_bytes": {"model.safetensors": 50000}})
    proc = run_finetune(train_args(tmp_path / "out"), env=hub_env(hub, home))
    gets = fetched(hub, "model.safetensors")
    assert [g["range"] for g in gets] == [None, "bytes=50000-"], gets
    assert gets[1]["status"] == 206 and "resuming (attempt 2 of 5)" in proc.stderr
    snapshot = home / "hub" / "models--org--tiny" / "snapshots" / repos["commits"]["model"]
    assert (snapshot / "model.safetensors").read_bytes() == repos["files"]["model.safetensors"]


def expect_error(hub, tmp_path, needles, extra_env=None, args=None, status=1):
    home = tmp_path / "home"
    proc = run_finetune(args or train_args(tmp_path / "out"), check=False,
                        env=hub_env(hub, home, **(extra_env or {})), timeout=120)
    message = [line for line in proc.stderr.splitlines() if "[error]" in line]
    assert proc.returncode == status, proc.stderr[-3000:]
    assert len(message) == 1, proc.stderr[-3000:]
    for needle in needles:
        assert needle in message[0], message[0]
    return home, message[0]


def no_complete_weights(home, repos):
    """model.safetensors only as blobs/<sha256>.incomplete: no blob under its final name, no link."""
    import hashlib
    blobs = home / "hub" / "models--org--tiny" / "blobs"
    sha = hashlib.sha256(repos["files"]["model.safetensors"]).hexdigest()
    assert (blobs / (sha + ".incomplete")).exists() and not (blobs / sha).exists()
    assert not list((home / "hub").glob("models--org--tiny/snapshots/*/model.safetensors"))


def test_gated_repo_without_token_with_a_wrong_one_and_with_the_right_one(hub, tmp_path):
    args = train_args(tmp_path / "out", model="org/gated")
    expect_error(hub, tmp_path / "none", ["model org/gated (revision", "gated repo, HTTP 401", "--hub_token"], args=args)
    expect_error(hub, tmp_path / "wrong", ["gated repo, HTTP 403", "the token from HF_TOKEN was sent"],
                 extra_env={"HF_TOKEN": "hf_wrong"}, args=args)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    run_finetune(args, env=hub_env(hub, tmp_path / "right", HF_TOKEN_PATH=token_file))


@pytest.mark.parametrize("case", ["repo", "revision", "file"])
def test_not_found_names_repo_revision_and_file(hub, tmp_path, case):
    if case == "repo":
        expect_error(hub, tmp_path, ["model org/missing (revision main)", "repository not found, HTTP 404"],
                     args=train_args(tmp_path / "out", model="org/missing"))
    elif case == "revision":
        expect_error(hub, tmp_path, ["model org/tiny (revision v9)", "revision v9 not found, HTTP 404"],
                     args=train_args(tmp_path / "out", extra=["--revision", "v9"]))
    else:
        hub.inject({"status": {"resolve": 404}})
        expect_error(hub, tmp_path, ["org/tiny (revision", "file ", "not found, HTTP 404"])


def test_transport_failures_are_one_line_errors_and_leave_no_complete_file(hub, repos, tmp_path):
    # connection reset mid-file on every attempt: the partial file stays, marked .incomplete
    hub.inject({"drop_after_bytes": {"model.safetensors": 1000}, "times": 10})
    home, _ = expect_error(hub, tmp_path / "reset", ["file model.safetensors", "connection"])
    no_complete_weights(home, repos)
    # a server that stops answering: the metadata timeout
    hub.inject({"delay_seconds": {"/api/models/org/tiny": 5}})
    expect_error(hub, tmp_path / "slow", ["model org/tiny (revision main)", "timed out"],
                 extra_env={"HF_HUB_ETAG_TIMEOUT": 1})
    # nothing listening, and a host name that does not resolve
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    expect_error(hub, tmp_path / "refused", ["model org/tiny (revision main)", "cannot connect"],
                 extra_env={"HF_ENDPOINT": closed})
    expect_error(hub, tmp_path / "dns", ["model org/tiny (revision main)", "cannot resolve the host name"],
                 extra_env={"HF_ENDPOINT": "http://hub.invalid"})


def test_disk_full_is_named_and_resumable(hub, repos, tmp_path):
    """The cache on a 64 KiB tmpfs (a mount namespace of its own): the weights do not fit."""
    home = tmp_path / "home"
    (home / "hub").mkdir(parents=True)
    from conftest import finetune_bin
    env = {**os.environ, **hub_env(hub, home)}
    args = [finetune_bin()] + [str(a) for a in train_args(tmp_path / "out")]
    script = 'mount -t tmpfs -o size=64k tmpfs "$HF_HUB_CACHE" && exec "$@"'
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh"] + args, capture_output=True, text=True,
                          env=env, timeout=120)
    expected = "No space left on device"
    if "[error]" not in proc.stderr:  # no mount namespace here (not root): a file-size limit fails the write alike
        import resource
        import signal

        def limit_file_size():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120, preexec_fn=limit_file_size)
        expected = "File too large"
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if "[error]" in line]
    assert len(errors) == 1 and expected in errors[0] and ".incomplete" in errors[0], errors


def test_renamed_repo_and_parquet_export_of_a_csv_dataset(hub, repos, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    make_repo(repos["store"], "model", "org/tiny-v2", repos["files"], renamed_from="org/tiny-old")
    rows = [json.loads(l) for l in repos["dataset"]["data/train.jsonl"].decode().splitlines()]
    table = pa.table({"input_ids": [r["input_ids"] for r in rows]})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    make_repo(repos["store"], "dataset", "org/csvrows", {"train.csv": b"a,b\n1,2\n"})
    make_repo(repos["store"], "dataset", "org/csvrows", {"default/train/0000.parquet": sink.getvalue().to_pybytes()},
              revision="refs/convert/parquet")
    home = tmp_path / "home"
    proc = run_finetune(train_args(tmp_path / "out", model="org/tiny-old", dataset="org/csvrows"), env=hub_env(hub, home))
    assert "Parquet export" in proc.stderr
    assert (home / "hub" / "datasets--org--csvrows" / "refs" / "refs" / "convert" / "parquet").exists()
    assert "40 samples kept" in proc.stderr


def test_push_model_is_read_back_by_huggingface_hub(hub, tmp_path):
    from huggingface_hub import snapshot_download
    home = tmp_path / "home"
    out = tmp_path / "out"
    proc = run_finetune(train_args(out, extra=["--push_model", "--hub_path", "me/tuned", "--hub_token", TOKEN]),
                        env=hub_env(hub, home))
    assert "pushed: " in proc.stderr
    paths = [(r["method"], r["path"].split("?")[0]) for r in hub.requests()]
    assert ("POST", "/api/models/me/tuned/preupload/main") in paths
    assert ("POST", "/me/tuned.git/info/lfs/objects/batch") in paths
    assert ("POST", "/api/models/me/tuned/commit/main") in paths
    back = snapshot_download("me/tuned", cache_dir=tmp_path / "readback", endpoint=hub.url, token=TOKEN)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert open(os.path.join(back, name), "rb").read() == (out / name).read_bytes()
    expect_error(hub, tmp_path / "nopath", ["--push_model needs --hub_path"], status=2,
                 args=train_args(tmp_path / "o2", extra=["--push_model"]))
