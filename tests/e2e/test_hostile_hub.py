"""The binary's hub client against a hostile hub (the mock hub's hostile faults, tests/reference/
mock_hub.py): answers that would name paths outside the cache, bodies longer than announced, bytes
trickled or without end, a redirect to file://. Each must end in one clear error line, within a
bounded time, with nothing written outside HF_HUB_CACHE."""
import json
import os
import time

import pytest

from conftest import run_finetune
from mock_hub import MockHub, make_repo
import tiny_models


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile_repos")
    model_dir = root / "tiny"
    tiny_models.make_model("llama", model_dir)
    rows = tiny_models.make_tokenized_rows(8, seed=3)
    dataset = {"data/train.jsonl": b"".join(json.dumps(r).encode() + b"\n" for r in rows)}
    store = root / "store"
    make_repo(store, "model", "org/tiny", {p.name: p.read_bytes() for p in model_dir.iterdir()})
    make_repo(store, "dataset", "org/rows", dataset)
    return store


@pytest.fixture
def hub(store):
    with MockHub(store) as server:
        yield server


def tree(root):
    """Every path under root (files, links, directories), relative."""
    return {os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files}


def run_against(hub, tmp_path, **env):
    """finetune train against the hub with its cache three levels below tmp_path; returns (proc,
    the one [error] line, seconds taken). Asserts that nothing appeared outside the cache."""
    cache = tmp_path / "a" / "b" / "hub"
    cache.mkdir(parents=True)
    (tmp_path / "a" / "keep.txt").write_text("untouched")
    before = tree(tmp_path)
    environment = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "a"), "HF_HUB_CACHE": str(cache),
                   "HF_TOKEN": "", "HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "",
                   **{k: str(v) for k, v in env.items()}}
    args = ["--model_name", "org/tiny", "--dataset", "org/rows", "--max_steps", 1,
            "--output_dir", tmp_path / "out", "--per_device_train_batch_size", 2]
    start = time.monotonic()
    proc = run_finetune(args, check=False, env=environment, timeout=60)
    seconds = time.monotonic() - start
    errors = [line for line in proc.stderr.splitlines() if "[error]" in line]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-3000:]
    outside = {p for p in tree(tmp_path) - before if not p.startswith(os.path.join("a", "b", "hub"))}
    assert all(p == "out" or p.startswith("out" + os.sep) for p in outside), outside  # the run's own output only
    assert (tmp_path / "a" / "keep.txt").read_text() == "untouched"
    return proc, errors[0], seconds


@pytest.mark.parametrize("commit", ["../../..", "../../../a", "0123456789ABCDEF0123456789abcdef01234567"])
def test_a_commit_header_that_is_not_a_commit_id_is_refused(hub, tmp_path, commit):
    hub.inject({"headers": {"resolve/": {"X-Repo-Commit": commit}}, "times": 100})
    _, error, _ = run_against(hub, tmp_path)
    assert "X-Repo-Commit" in error and "not 40 lowercase hex digits" in error, error


def test_a_commit_header_naming_another_commit_is_refused(hub, tmp_path):
    hub.inject({"headers": {"resolve/": {"X-Repo-Commit": "f" * 40}}, "times": 100})
    _, error, _ = run_against(hub, tmp_path)
    assert "commit " + "f" * 40 + " for a request of commit" in error, error


@pytest.mark.parametrize("etag", ['"../../../../x"', '"a/b"', '".hidden"', '"x\\y"'])
def test_an_etag_that_is_not_a_file_name_is_refused(hub, tmp_path, etag):
    hub.inject({"headers": {"/config.json": {"ETag": etag}}, "times": 100})
    _, error, _ = run_against(hub, tmp_path)
    assert "the ETag" in error and "not usable as a blob file name" in error, error


@pytest.mark.parametrize("name", ["/etc/passwd", "../../../escape.json", "a/../../b.json", "a//b.json"])
def test_a_listing_with_paths_outside_the_repo_is_refused(hub, tmp_path, name):
    hub.inject({"siblings": {"/api/models/org/tiny": [name]}})
    _, error, _ = run_against(hub, tmp_path)
    assert f"lists a file named '{name}'" in error, error


def test_a_body_longer_than_announced_is_cut_at_the_announced_size(hub, tmp_path):
    hub.inject({"oversize_body": {"/config.json": 200 << 20}})
    _, error, seconds = run_against(hub, tmp_path)
    assert "file config.json" in error and "larger than the" in error and "bytes the hub announced" in error, error
    assert seconds < 20
    sizes = [p.stat().st_size for p in (tmp_path / "a" / "b" / "hub").rglob("*") if p.is_file()]
    assert max(sizes, default=0) < 1 << 20  # the disk did not fill: the long body was not kept


def test_a_content_length_larger_than_announced_is_refused_before_the_body(hub, tmp_path):
    hub.inject({"headers": {"/config.json": {"X-Linked-Size": "10"}}, "times": 100})
    _, error, _ = run_against(hub, tmp_path)
    assert "file config.json" in error and "larger than the 10 bytes the hub announced" in error, error


def test_a_trickled_download_ends_at_its_deadline(hub, tmp_path):
    hub.inject({"trickle_seconds": {"/config.json": 0.2}})
    _, error, seconds = run_against(hub, tmp_path, HF_HUB_DOWNLOAD_TIMEOUT=0.25)
    assert "file config.json" in error and "deadline of 1.5" in error and "HF_HUB_DOWNLOAD_TIMEOUT" in error, error
    assert seconds < 10


def test_trickled_metadata_ends_at_its_deadline(hub, tmp_path):
    hub.inject({"trickle_seconds": {"/api/models/org/tiny": 0.3}})
    _, error, seconds = run_against(hub, tmp_path, HF_HUB_ETAG_TIMEOUT=0.4)
    assert "model org/tiny (revision main)" in error and "deadline of 2.4" in error, error
    assert seconds < 10


def test_an_endless_json_answer_is_cut_at_64_MiB(hub, tmp_path):
    hub.inject({"endless_body": {"/api/models/org/tiny": True}})
    _, error, seconds = run_against(hub, tmp_path)
    assert "model org/tiny (revision main)" in error and "larger than the 67108864 bytes" in error, error
    assert seconds < 20


def test_a_redirect_to_file_is_refused(hub, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"sha": "' + "a" * 40 + '", "siblings": []}')
    hub.inject({"status": {"/api/models/org/tiny": 302},
                "headers": {"/api/models/org/tiny": {"Location": f"file://{secret}"}}})
    _, error, _ = run_against(hub, tmp_path)
    assert "not http:// or https://" in error and "HTTP 0" not in error, error
