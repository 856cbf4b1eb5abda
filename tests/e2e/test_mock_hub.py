"""The mock Hub (tests/reference/mock_hub.py) against the real `huggingface_hub` client.

Every test runs its own MockHub over its own tmp storage and downloads into its own tmp cache.
huggingface_hub reads HF_ENDPOINT and HF_HUB_CACHE at import time, so the tests pass `endpoint=`,
`cache_dir=` and `token=` explicitly instead of setting environment variables (token=False means
no Authorization header, whatever the machine's login).
"""
import hashlib
import os
import re
import signal
import subprocess
import sys

import httpx
import pytest
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from mock_hub import git_blob_sha1, make_repo, MockHub

MOCK_HUB_SCRIPT = os.path.join(os.path.dirname(__file__), "..", "reference", "mock_hub.py")
TOKEN = "hf_test_token"
WEIGHTS = bytes(range(256)) * 16  # 4096 bytes: LFS, served through the /_cdn/ redirect
MODEL_FILES = {
    "config.json": b'{"model_type": "llama", "hidden_size": 8}',
    "tokenizer.json": b'{"version": "1.0"}',
    "model.safetensors": WEIGHTS,
}


@pytest.fixture
def hub_root(tmp_path):
    return tmp_path / "hub"


@pytest.fixture
def hub(hub_root):
    with MockHub(hub_root, tokens=(TOKEN,)) as running:
        yield running


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


def storage_folder(cache, repo_type, repo_id):
    return cache / f"{repo_type}s--{repo_id.replace('/', '--')}"


def snapshot_files(folder):
    """{relative path: bytes} of every file under a snapshot folder."""
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def requests_matching(hub, method, substring):
    return [entry for entry in hub.requests() if entry["method"] == method and substring in entry["path"]]


def post_control(hub, name, payload=None):
    """POST to a /_mock/ control endpoint over HTTP, as the C++ tests do."""
    response = httpx.post(f"{hub.url}/_mock/{name}", json=payload or {})
    response.raise_for_status()


def test_snapshot_download_builds_the_cache_layout(hub, hub_root, cache):
    """blobs/<etag> (git sha1 for regular files, sha256 for LFS), relative snapshot symlinks, refs/main."""
    commit = make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    path = snapshot_download("org/tiny", endpoint=hub.url, cache_dir=cache, token=False)

    folder = storage_folder(cache, "model", "org/tiny")
    assert path == str(folder / "snapshots" / commit)
    assert (folder / "refs" / "main").read_text() == commit
    assert snapshot_files(folder / "snapshots" / commit) == MODEL_FILES
    for name, data in MODEL_FILES.items():
        etag = hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else git_blob_sha1(data)
        assert (folder / "blobs" / etag).read_bytes() == data
        assert os.readlink(folder / "snapshots" / commit / name) == f"../../blobs/{etag}"

    head = requests_matching(hub, "HEAD", "model.safetensors")
    cdn = requests_matching(hub, "GET", "/_cdn/")
    assert [entry["status"] for entry in head] == [302]
    assert [(entry["status"], entry["host"], entry["authorization"]) for entry in cdn] == [
        (200, f"localhost:{hub.port}", None)]


def test_snapshot_download_allow_patterns(hub, hub_root, cache):
    commit = make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    path = snapshot_download("org/tiny", endpoint=hub.url, cache_dir=cache, token=False,
                             allow_patterns=["*.json"])
    assert snapshot_files(cache / "models--org--tiny" / "snapshots" / commit) == {
        "config.json": MODEL_FILES["config.json"], "tokenizer.json": MODEL_FILES["tokenizer.json"]}
    assert path.endswith(commit)
    assert requests_matching(hub, "GET", "/_cdn/") == []


def test_dataset_main_and_parquet_branch(hub, hub_root, cache):
    """Dataset routes, and the refs/convert/parquet branch (quoted as refs%2Fconvert%2Fparquet)."""
    rows = b'{"text": "hello"}\n'
    parquet = b"PAR1" + bytes(100) + b"PAR1"
    main = make_repo(hub_root, "dataset", "org/ds", {"data/train.jsonl": rows})
    converted = make_repo(hub_root, "dataset", "org/ds", {"default/train/0000.parquet": parquet},
                          revision="refs/convert/parquet")

    main_path = snapshot_download("org/ds", repo_type="dataset", endpoint=hub.url, cache_dir=cache, token=False)
    parquet_path = snapshot_download("org/ds", repo_type="dataset", revision="refs/convert/parquet",
                                     endpoint=hub.url, cache_dir=cache, token=False)

    folder = storage_folder(cache, "dataset", "org/ds")
    assert snapshot_files(folder / "snapshots" / main) == {"data/train.jsonl": rows}
    assert snapshot_files(folder / "snapshots" / converted) == {"default/train/0000.parquet": parquet}
    assert (main_path, parquet_path) == (str(folder / "snapshots" / main), str(folder / "snapshots" / converted))
    assert (folder / "refs" / "main").read_text() == main
    assert (folder / "refs" / "refs" / "convert" / "parquet").read_text() == converted
    assert requests_matching(hub, "GET", "/api/datasets/org/ds/revision/refs%2Fconvert%2Fparquet")


def test_hf_hub_download_by_commit_sha_keeps_old_commits(hub, hub_root, cache):
    old = make_repo(hub_root, "model", "org/tiny", {"config.json": b'{"v": 1}'})
    new = make_repo(hub_root, "model", "org/tiny", {"config.json": b'{"v": 2}'})
    assert old != new
    for commit, expected in ((old, b'{"v": 1}'), (new, b'{"v": 2}')):
        path = hf_hub_download("org/tiny", "config.json", revision=commit, endpoint=hub.url, cache_dir=cache,
                               token=False)
        assert path.endswith(f"snapshots/{commit}/config.json")
        assert open(path, "rb").read() == expected
    assert not (cache / "models--org--tiny" / "refs").exists()  # a commit sha is not a ref


def test_renamed_repo_redirects_relatively(hub, hub_root, cache):
    commit = make_repo(hub_root, "model", "new-org/tiny", MODEL_FILES, renamed_from="old-org/tiny")
    path = snapshot_download("old-org/tiny", endpoint=hub.url, cache_dir=cache, token=False)
    assert path == str(cache / "models--old-org--tiny" / "snapshots" / commit)
    assert snapshot_files(cache / "models--old-org--tiny" / "snapshots" / commit) == MODEL_FILES
    assert {entry["status"] for entry in hub.requests() if "old-org" in entry["path"]} == {307}

    response = httpx.get(f"{hub.url}/old-org/tiny/resolve/main/config.json?x=1")
    assert response.status_code == 307
    assert response.headers["Location"] == "/new-org/tiny/resolve/main/config.json?x=1"


def test_gated_repo_needs_a_valid_token(hub, hub_root, cache):
    """Info stays public (gated: "auto"); files answer 401 without a token and 403 with a bad one."""
    make_repo(hub_root, "model", "org/gated", MODEL_FILES, gated=True)
    assert HfApi(endpoint=hub.url).model_info("org/gated", token=False).gated == "auto"

    def download(token):
        return hf_hub_download("org/gated", "config.json", endpoint=hub.url, cache_dir=cache, token=token)

    with pytest.raises(GatedRepoError) as missing:
        download(False)
    with pytest.raises(GatedRepoError) as wrong:
        download("hf_wrong")
    assert (missing.value.response.status_code, wrong.value.response.status_code) == (401, 403)
    assert open(download(TOKEN), "rb").read() == MODEL_FILES["config.json"]
    with pytest.raises(GatedRepoError):
        snapshot_download("org/gated", endpoint=hub.url, cache_dir=cache / "other", token=False)


@pytest.mark.parametrize("repo_id, revision, filename, error", [
    ("org/missing", "main", "config.json", RepositoryNotFoundError),
    ("org/tiny", "no-such-branch", "config.json", RevisionNotFoundError),
    ("org/tiny", "0" * 40, "config.json", RevisionNotFoundError),
    ("org/tiny", "main", "missing.json", EntryNotFoundError),
])
def test_not_found_errors(hub, hub_root, cache, repo_id, revision, filename, error):
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    with pytest.raises(error) as raised:
        hf_hub_download(repo_id, filename, revision=revision, endpoint=hub.url, cache_dir=cache, token=False)
    assert raised.value.response.status_code == 404


def test_repo_info_not_found_errors(hub, hub_root):
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    api = HfApi(endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("org/missing")
    with pytest.raises(RevisionNotFoundError):
        api.model_info("org/tiny", revision="nope")


def test_model_info_with_files_metadata(hub, hub_root):
    commit = make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    info = HfApi(endpoint=hub.url).model_info("org/tiny", files_metadata=True, token=False)
    siblings = {sibling.rfilename: sibling for sibling in info.siblings}
    assert info.sha == commit and info.id == "org/tiny" and info.private is False
    assert siblings["config.json"].blob_id == git_blob_sha1(MODEL_FILES["config.json"])
    assert siblings["config.json"].lfs is None
    assert siblings["model.safetensors"].size == len(WEIGHTS)
    assert siblings["model.safetensors"].lfs.sha256 == hashlib.sha256(WEIGHTS).hexdigest()


def test_dropped_connection_is_downloaded_again_from_scratch(hub, hub_root, cache):
    """With its 10 MB read chunks huggingface_hub has written none of the 1000 bytes it got, so its one
    retry (after a 1 s sleep) asks for the whole file again, without a Range header."""
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    post_control(hub, "faults", {"drop_after_bytes": {"model.safetensors": 1000}})
    path = hf_hub_download("org/tiny", "model.safetensors", endpoint=hub.url, cache_dir=cache, token=False)
    assert open(path, "rb").read() == WEIGHTS
    assert [(entry["status"], entry["range"], entry["faults"]) for entry in requests_matching(hub, "GET", "/_cdn/")] == [
        (200, None, ["drop_after_bytes"]), (200, None, [])]


def test_dropped_connection_resumes_with_range(hub, hub_root, cache, monkeypatch):
    """With 256-byte read chunks 3 chunks (768 bytes) are on disk when the connection drops after 1000:
    the retry sends Range: bytes=768- and gets a 206."""
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 256)
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    post_control(hub, "faults", {"drop_after_bytes": {"/_cdn/": 1000}})
    path = hf_hub_download("org/tiny", "model.safetensors", endpoint=hub.url, cache_dir=cache, token=False)
    assert open(path, "rb").read() == WEIGHTS
    assert [(entry["status"], entry["range"]) for entry in requests_matching(hub, "GET", "/_cdn/")] == [
        (200, None), (206, "bytes=768-")]


def test_status_fault_is_retried_by_the_client(hub, hub_root, cache):
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    post_control(hub, "faults", {"status": {"resolve/main/config.json": 500}})
    path = hf_hub_download("org/tiny", "config.json", endpoint=hub.url, cache_dir=cache, token=False)
    assert open(path, "rb").read() == MODEL_FILES["config.json"]
    assert [entry["status"] for entry in requests_matching(hub, "HEAD", "config.json")] == [500, 200]


def test_fault_times_delay_and_log_reset(hub, hub_root):
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    url = f"{hub.url}/org/tiny/resolve/main/config.json"
    post_control(hub, "faults", {"status": {"config.json": 503}, "times": 2})
    assert [httpx.get(url).status_code for _ in range(3)] == [503, 503, 200]

    post_control(hub, "reset_log")
    post_control(hub, "faults", {"delay_seconds": {"config.json": 0.5}})
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(url, timeout=0.2)
    assert httpx.get(url, timeout=0.2).status_code == 200  # the delay fired once
    log = httpx.get(f"{hub.url}/_mock/log").json()
    assert [entry["faults"] for entry in log if entry["status"] == 200] == [[]]

    post_control(hub, "faults", {"status": {"config.json": 500}})
    post_control(hub, "reset_faults")
    assert httpx.get(url).status_code == 200


def test_hostile_answers(hub, hub_root):
    """The hostile faults tests/e2e/test_hostile_hub.py sends the binary, as documented."""
    commit = make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    url = f"{hub.url}/org/tiny/resolve/main/config.json"
    post_control(hub, "faults", {"headers": {"config.json": {"X-Repo-Commit": "../../..", "ETag": '"a/b"'}}})
    head = httpx.head(url)
    assert (head.headers["X-Repo-Commit"], head.headers["ETag"]) == ("../../..", '"a/b"')
    assert httpx.head(url).headers["X-Repo-Commit"] == commit  # fired once

    post_control(hub, "faults", {"siblings": {"/api/models/org/tiny": ["/etc/passwd"]}})
    names = [s["rfilename"] for s in httpx.get(f"{hub.url}/api/models/org/tiny").json()["siblings"]]
    assert names == sorted(MODEL_FILES) + ["/etc/passwd"]

    post_control(hub, "faults", {"oversize_body": {"config.json": 100000}})
    with httpx.stream("GET", url) as response:
        assert "content-length" not in response.headers
        assert len(response.read()) == 100000

    post_control(hub, "faults", {"endless_body": {"/api/models": True}})
    with httpx.stream("GET", f"{hub.url}/api/models/org/tiny") as response:
        received = 0
        for chunk in response.iter_bytes():
            received += len(chunk)
            if received > 1 << 20:
                break
        assert received > 1 << 20 and "content-length" not in response.headers

    post_control(hub, "faults", {"trickle_seconds": {"config.json": 0.05}})
    with httpx.stream("GET", url) as response:
        first = next(response.iter_raw(1))
        assert len(first) == 1 and response.headers["content-length"] == str(len(MODEL_FILES["config.json"]))


def test_range_requests_on_resolve(hub, hub_root):
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    url = f"{hub.url}/org/tiny/resolve/main/config.json"
    data = MODEL_FILES["config.json"]
    with httpx.Client() as client:  # one keep-alive connection for all requests
        head = client.head(url)
        partial = client.get(url, headers={"Range": "bytes=5-"})
        beyond = client.get(url, headers={"Range": f"bytes={len(data)}-"})
        whole = client.get(url)
    assert head.headers["Content-Length"] == str(len(data)) and head.content == b""
    assert head.headers["ETag"] == f'"{git_blob_sha1(data)}"'
    assert (partial.status_code, partial.content) == (206, data[5:])
    assert partial.headers["Content-Range"] == f"bytes 5-{len(data) - 1}/{len(data)}"
    assert (beyond.status_code, beyond.headers["Content-Range"]) == (416, f"bytes */{len(data)}")
    assert whole.content == data


def test_upload_folder_round_trip(hub, cache, tmp_path, monkeypatch):
    """create_repo + upload_folder (regular file and LFS file), then download the new commit.

    With hf_xet installed, huggingface_hub 1.33 uploads through Xet without asking the server (there
    is no fallback to LFS), so the test disables Xet to exercise the preupload/LFS/commit protocol."""
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    folder = tmp_path / "upload"
    files = {"notes.txt": b"small regular file", "weights/adapter.bin": bytes(range(256)) * 8}
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)

    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo("org/uploaded", exist_ok=True)
    assert api.create_repo("org/uploaded", exist_ok=True).repo_id == "org/uploaded"  # the 409 path
    commit = api.upload_folder(repo_id="org/uploaded", folder_path=folder)

    path = snapshot_download("org/uploaded", revision=commit.oid, endpoint=hub.url, cache_dir=cache, token=False)
    assert snapshot_files(cache / "models--org--uploaded" / "snapshots" / commit.oid) == files
    assert path.endswith(commit.oid)
    assert api.model_info("org/uploaded").sha == commit.oid

    lfs_oid = hashlib.sha256(files["weights/adapter.bin"]).hexdigest()
    calls = [(entry["method"], re.sub(r"\?.*", "", entry["path"]), entry["status"]) for entry in hub.requests()]
    assert calls[:7] == [
        ("POST", "/api/repos/create", 200),
        ("POST", "/api/repos/create", 409),
        ("POST", "/api/models/org/uploaded/preupload/main", 200),
        ("POST", "/org/uploaded.git/info/lfs/objects/batch", 200),
        ("PUT", f"/_lfs/upload/{lfs_oid}", 200),
        ("POST", "/_lfs/verify", 200),
        ("POST", "/api/models/org/uploaded/commit/main", 200),
    ]


def test_uploads_need_a_valid_token_and_consistent_content(hub, hub_root):
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    with pytest.raises(HfHubHTTPError) as refused:
        HfApi(endpoint=hub.url, token="hf_wrong").create_repo("org/other")
    assert refused.value.response.status_code == 401

    data = b"x" * 2000
    oid = hashlib.sha256(data).hexdigest()
    assert httpx.put(f"{hub.url}/_lfs/upload/{oid}?size=2000", content=b"y" * 2000).status_code == 400
    assert httpx.put(f"{hub.url}/_lfs/upload/{oid}?size=1999", content=data).status_code == 400
    commit_line = b'{"key": "lfsFile", "value": {"path": "big.bin", "algo": "sha256", "oid": "%s", "size": 2000}}' % (
        oid.encode())
    response = httpx.post(f"{hub.url}/api/models/org/tiny/commit/main", content=commit_line,
                          headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"})
    assert response.status_code == 422  # the LFS object was never uploaded


def test_command_line_mode(hub_root):
    """`mock_hub.py --port 0` prints READY <url>, serves, and exits cleanly on SIGTERM."""
    make_repo(hub_root, "model", "org/tiny", MODEL_FILES)
    process = subprocess.Popen([sys.executable, MOCK_HUB_SCRIPT, "--root", str(hub_root), "--port", "0",
                                "--tokens", "hf_a,hf_b"], stdout=subprocess.PIPE, text=True)
    try:
        ready = process.stdout.readline()
        assert re.fullmatch(r"READY http://127\.0\.0\.1:\d+\n", ready)
        url = ready.split()[1]
        assert httpx.get(f"{url}/api/models/org/tiny").json()["id"] == "org/tiny"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
