"""A mock Hugging Face Hub HTTP server (standard library only), modelled on what the real
`huggingface_hub` client (1.33) sends and expects.

Use it as a module::

    from mock_hub import MockHub, make_repo
    make_repo(root, "model", "org/tiny", {"config.json": b"{}", "model.safetensors": weights})
    with MockHub(root, tokens=("hf_test_token",)) as hub:
        ...  # hub.url is "http://127.0.0.1:<port>"

or as a program (prints exactly one line ``READY http://<host>:<port>`` once listening, then
serves until SIGTERM/SIGINT)::

    python tests/reference/mock_hub.py --root DIR [--host 127.0.0.1] [--port 0] [--tokens hf_a,hf_b]

Storage layout (under ROOT; `make_repo` writes it, uploads extend it, every request re-reads it)
------------------------------------------------------------------------------------------------
    objects/<sha256>                                   the bytes of every file, content-addressed
    repos/<models|datasets>/<org>/<name>/repo.json     {"gated": bool, "created_at": iso-date,
                                                        "branches": {"main": <commit>, ...}}
                                                    or {"renamed_to": "<org>/<name>"} (a renamed repo)
    repos/<models|datasets>/<org>/<name>/commits/<commit>.json
                                                       {"files": {path: sha256}, "parent": commit|null,
                                                        "message": str, "date": iso-date}
A commit id is sha1 over the sorted lines "<path>\\0<sha256 of content>\\n": deterministic, and
different whenever a file changes. Every commit ever written stays resolvable by its id.
Branch names may contain slashes ("refs/convert/parquet").

LFS rule
--------
A non-empty file is stored "in LFS" when it is >= 1024 bytes or its name ends in .safetensors,
.parquet, .bin or .pth (`is_lfs`). The rule is applied when serving and when answering preupload,
so it depends only on a file's path and size. No X-Xet-* header and no xetHash is ever emitted.

Endpoints (repo ids are always ORG/NAME; dataset routes carry a "datasets/" prefix)
--------------------------------------------------------------------------------
GET  /api/{models|datasets}/{id}[/revision/{rev}][?blobs=true]   repo info (rev quoted, safe="")
GET  /api/{models|datasets}/{id}/tree/{rev}[/{dir}][?recursive=true]  file listing
HEAD/GET /[datasets/]{id}/resolve/{rev}/{path}
     regular file: 200, ETag = "<git blob sha1>", X-Repo-Commit, Range supported (206/416)
     LFS file: 302, Location = http://<cdn_host>:<port>/_cdn/<sha256>/<path> (absolute; cdn_host
     defaults to "localhost", a different host name than 127.0.0.1 exactly like the real CDN, so
     huggingface_hub stops at the 302 and reads X-Linked-Etag = "<sha256>", X-Linked-Size,
     X-Repo-Commit; ETag = "<git sha1 of the LFS pointer file>")
HEAD/GET /_cdn/<sha256>[/<anything>]   the bytes, ETag = "<sha256>", Range supported, no auth needed
POST /api/repos/create                 {"name", "organization", "type"} -> {"url"}; 409 (with "url") if taken
POST /api/{models|datasets}/{id}/preupload/{rev}   uploadMode "lfs"/"regular", shouldIgnore false, oid
POST /[datasets/]{id}.git/info/lfs/objects/batch   git-LFS batch, "basic" transfer only
PUT  /_lfs/upload/<sha256>?size=N      (the batch "upload" href) checks sha256 and size, 400 on mismatch
POST /_lfs/verify                      (the batch "verify" href) {"oid", "size"}
POST /api/{models|datasets}/{id}/commit/{branch}   application/x-ndjson commit -> {"commitOid", ...}

Authentication (tokens given to MockHub / --tokens; "Authorization: Bearer <token>")
-------------------------------------------------------------------------------------
* Ungated repos are served to anyone; a token, valid or not, is ignored there.
* Gated repos (gated: "auto" in their info) keep info and tree listings public, like the real Hub,
  but resolve answers 401 X-Error-Code: GatedRepo without a token and 403 GatedRepo with a token
  that is not in the list.
* Writes (create, preupload, LFS batch, verify, commit) need a valid token: 401 otherwise. The LFS
  upload href is "pre-signed": huggingface_hub PUTs to it without any Authorization header.

Errors: 404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound (EntryNotFound also
carries X-Repo-Commit), X-Error-Message, and a JSON body {"error": "..."}. A renamed repo answers
every request for its old id with 307 and a relative Location (the same path under the new id).

Test control (never logged, never faulted)
------------------------------------------
POST /_mock/faults   {"drop_after_bytes": {"<substring>": N}, "delay_seconds": {"<substring>": S},
                      "status": {"<substring>": CODE}, "times": k}
     A fault matches a request whose raw path (with query) contains the substring; it fires on the
     next k (default 1) matching requests, then clears. drop_after_bytes only fires on a GET that
     sends file bytes (resolve of a regular file, or /_cdn/): headers announce the full length, only
     N body bytes are sent, then the connection is closed. delay_seconds sleeps before answering;
     status answers that code with {"error": "injected fault"}.
     Hostile answers, for clients that must not trust the server (same matching and `times`):
       "headers": {"<substring>": {"Name": "value", ...}}   these headers replace the answer's own
                  (any method; e.g. X-Repo-Commit "../../..", an ETag with slashes);
       "siblings": {"<substring>": ["name", ...]}   extra file names in a repo info listing;
       "oversize_body": {"<substring>": N}   a GET answers its usual status and headers but N bytes
                  of body, without Content-Length (ended by closing the connection);
       "endless_body": {"<substring>": true}   a GET answers 200 and bytes without end, without
                  Content-Length, until the client hangs up;
       "trickle_seconds": {"<substring>": S}   a GET's body (usual headers) goes one byte every S
                  seconds.
POST /_mock/reset_faults   drops pending faults.
GET  /_mock/log            JSON list, one entry per request so far: {"method", "path" (raw, with
                           query), "host", "range", "authorization" (header value or null),
                           "status", "faults" (names of the faults that fired), "client" (the
                           client's IP address)}
POST /_mock/reset_log      clears the log.
"""

import argparse
import base64
import hashlib
import json
import os
import re
import signal
import socketserver
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

DEFAULT_TOKENS = ("hf_test_token",)
LFS_MIN_SIZE = 1024
LFS_EXTENSIONS = (".safetensors", ".parquet", ".bin", ".pth")
REPO_TYPE_DIRS = {"model": "models", "dataset": "datasets"}
REPO_TYPES_BY_PLURAL = {plural: singular for singular, plural in REPO_TYPE_DIRS.items()}
FAULT_KINDS = ("drop_after_bytes", "delay_seconds", "status", "headers", "siblings", "oversize_body", "endless_body",
               "trickle_seconds")
COMMIT_ID = re.compile(r"[0-9a-f]{40}")
SHA256_ID = re.compile(r"[0-9a-f]{64}")
RANGE = re.compile(r"bytes=(\d*)-(\d*)")


# ---------------------------------------------------------------- content rules and hashes


def is_lfs(path, size):
    """Whether a file of this path and size is stored in LFS (see the module docstring)."""
    return size > 0 and (size >= LFS_MIN_SIZE or path.endswith(LFS_EXTENSIONS))


def git_blob_sha1(data):
    """The git object id of a blob: sha1 over "blob <size>\\0" + content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256, size):
    """The git-LFS pointer file that git stores in place of an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def commit_id(files):
    """Deterministic commit id of a {path: sha256} mapping."""
    lines = "".join(f"{path}\0{files[path]}\n" for path in sorted(files))
    return hashlib.sha1(lines.encode()).hexdigest()


def iso_now():
    """The current UTC time in the Hub's date format (2024-01-31T12:00:00.000Z)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# ---------------------------------------------------------------- storage


def _write_atomically(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Store:
    """The on-disk layout described in the module docstring."""

    def __init__(self, root):
        self.root = Path(root)

    def _repo_dir(self, repo_type, repo_id):
        return self.root / "repos" / REPO_TYPE_DIRS[repo_type] / repo_id

    def read_repo(self, repo_type, repo_id):
        path = self._repo_dir(repo_type, repo_id) / "repo.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def write_repo(self, repo_type, repo_id, repo):
        _write_atomically(self._repo_dir(repo_type, repo_id) / "repo.json", json.dumps(repo, indent=1).encode())

    def read_commit(self, repo_type, repo_id, commit):
        path = self._repo_dir(repo_type, repo_id) / "commits" / f"{commit}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def write_commit(self, repo_type, repo_id, files, parent, message):
        """Store a commit of {path: sha256} and return its id (an existing identical commit is kept)."""
        commit = commit_id(files)
        path = self._repo_dir(repo_type, repo_id) / "commits" / f"{commit}.json"
        if not path.is_file():
            record = {"files": files, "parent": parent, "message": message, "date": iso_now()}
            _write_atomically(path, json.dumps(record, indent=1).encode())
        return commit

    def resolve_revision(self, repo_type, repo_id, repo, revision):
        """The commit id of a branch name or of a stored commit id, else None."""
        if revision in repo["branches"]:
            return repo["branches"][revision]
        if COMMIT_ID.fullmatch(revision) and self.read_commit(repo_type, repo_id, revision) is not None:
            return revision
        return None

    def object_path(self, sha256):
        return self.root / "objects" / sha256

    def has_object(self, sha256):
        return SHA256_ID.fullmatch(sha256) is not None and self.object_path(sha256).is_file()

    def put_object(self, data):
        sha256 = hashlib.sha256(data).hexdigest()
        if not self.has_object(sha256):
            _write_atomically(self.object_path(sha256), data)
        return sha256

    def read_object(self, sha256):
        return self.object_path(sha256).read_bytes()

    def describe(self, path, sha256):
        """What the Hub reports about one file: size, git blob id and, for LFS files, the lfs record."""
        size = self.object_path(sha256).stat().st_size
        if not is_lfs(path, size):
            return {"size": size, "blob_id": git_blob_sha1(self.read_object(sha256)), "lfs": None}
        pointer = lfs_pointer(sha256, size)
        lfs = {"sha256": sha256, "size": size, "pointerSize": len(pointer)}
        return {"size": size, "blob_id": git_blob_sha1(pointer), "lfs": lfs}


def _new_repo():
    return {"gated": False, "created_at": iso_now(), "branches": {}}


def make_repo(root, repo_type, repo_id, files, revision="main", gated=False, renamed_from=None):
    """Write (or update) a repo under `root` and return the new commit id of branch `revision`.

    `repo_type` is "model" or "dataset", `files` maps repo paths to bytes and become the whole
    content of `revision` (other branches are kept). `gated=True` makes file downloads need a
    token. `renamed_from="old-org/old-name"` makes the old id redirect (307) to this repo.
    """
    if repo_type not in REPO_TYPE_DIRS:
        raise ValueError(f"repo_type must be one of {sorted(REPO_TYPE_DIRS)}, not {repo_type!r}")
    store = Store(root)
    repo = store.read_repo(repo_type, repo_id) or _new_repo()
    repo["gated"] = gated
    objects = {path: store.put_object(data) for path, data in files.items()}
    parent = repo["branches"].get(revision)
    repo["branches"][revision] = store.write_commit(repo_type, repo_id, objects, parent, f"make_repo {revision}")
    store.write_repo(repo_type, repo_id, repo)
    if renamed_from is not None:
        store.write_repo(repo_type, renamed_from, {"renamed_to": repo_id})
    return repo["branches"][revision]


# ---------------------------------------------------------------- faults and request log


class FaultBook:
    """Pending injected faults; each fires on the next `times` matching requests."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending = []  # [kind, substring, value, remaining]

    def add(self, spec):
        if not isinstance(spec, dict):
            raise ValueError(f"a fault spec is a JSON object, not {spec!r}")
        times = int(spec.get("times", 1))
        unknown = set(spec) - set(FAULT_KINDS) - {"times"}
        if unknown or times < 1:
            raise ValueError(f"bad fault spec {spec!r}: keys are {FAULT_KINDS} and 'times' >= 1")
        with self._lock:
            for kind in FAULT_KINDS:
                for substring, value in spec.get(kind, {}).items():
                    self._pending.append([kind, substring, value, times])

    def take(self, kind, path):
        """The value of the first pending `kind` fault matching `path` (consuming one use), or None."""
        with self._lock:
            for fault in self._pending:
                if fault[0] == kind and fault[1] in path:
                    fault[3] -= 1
                    if fault[3] == 0:
                        self._pending.remove(fault)
                    return fault[2]
        return None

    def clear(self):
        with self._lock:
            self._pending.clear()


class RequestLog:
    """Thread-safe list of the requests served (control requests excluded)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = []

    def append(self, entry):
        with self._lock:
            self._entries.append(entry)

    def entries(self):
        with self._lock:
            return [dict(entry) for entry in self._entries]

    def clear(self):
        with self._lock:
            self._entries.clear()


# ---------------------------------------------------------------- HTTP


class HubError(Exception):
    """An error answer: status, X-Error-Message (and JSON body) and an optional X-Error-Code."""

    def __init__(self, status, message, code=None, headers=None, body=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}
        self.body = body or {"error": message}


class Redirect(Exception):
    """A 307 answer to `location` (a renamed repo)."""

    def __init__(self, location):
        super().__init__(location)
        self.location = location


class RepoRoute:
    """A request path that names a repo: its type, id and where the id sits in the raw path."""

    def __init__(self, repo_type, raw_segments, id_index, suffix=""):
        self.repo_type = repo_type
        self.raw_segments = raw_segments
        self.id_index = id_index
        self.suffix = suffix
        org, name = (unquote(s) for s in raw_segments[id_index:id_index + 2])
        self.repo_id = f"{org}/{name.removesuffix(suffix)}"

    def moved_to(self, new_id, query):
        """The relative URL of the same request for `new_id`."""
        segments = list(self.raw_segments)
        new_org, new_name = new_id.split("/")
        segments[self.id_index:self.id_index + 2] = [quote(new_org), quote(new_name) + self.suffix]
        return "/".join(segments) + (f"?{query}" if query else "")


def _parse_byte_range(header, total):
    """(start, end) inclusive for a "Range: bytes=..." header, None to send everything."""
    match = RANGE.fullmatch((header or "").strip())
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":
        start, end = max(total - int(last), 0), total - 1
    else:
        start, end = int(first), min(int(last), total - 1) if last else total - 1
    if start >= total or start > end:
        raise HubError(416, "Range Not Satisfiable", headers={"Content-Range": f"bytes */{total}"})
    return start, end


class HubHandler(BaseHTTPRequestHandler):
    """One connection; self.server.hub is the MockHub."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_GET

    def log_message(self, format, *args):
        pass  # the request log is served at /_mock/log

    # ---- plumbing

    @property
    def hub(self):
        return self.server.hub

    @property
    def store(self):
        return self.server.hub.store

    def _dispatch(self):
        self._status = None
        self._fired = []
        body = self._read_body()
        split = urlsplit(self.path)
        raw_segments = split.path.split("/")
        segments = [unquote(s) for s in raw_segments[1:]]
        if segments[0] == "_mock":
            return self._guarded(self._control, segments[1:], body)
        try:
            self._guarded(self._serve, raw_segments, segments, split.query, body)
        finally:
            self.hub.log.append({
                "method": self.command, "path": self.path, "host": self.headers.get("Host"),
                "range": self.headers.get("Range"), "authorization": self.headers.get("Authorization"),
                "status": self._status, "faults": self._fired, "client": self.client_address[0],
            })

    def _guarded(self, handler, *args):
        """Run a route handler and turn its exceptions into answers (a malformed request gets a 400)."""
        try:
            try:
                handler(*args)
            except HubError as error:
                self._send_error(error)
            except Redirect as redirect:
                self._send(307, b"", {"Location": redirect.location})
            except (KeyError, TypeError, ValueError) as error:
                self._send_error(HubError(400, f"malformed request: {error!r}"))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked_body()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _read_chunked_body(self):
        parts = []
        while (size := int(self.rfile.readline().split(b";")[0].strip(), 16)) > 0:
            parts.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return b"".join(parts)

    def _send(self, status, body, headers=None, content_type="application/json", send_only=None):
        """Answer with a correct Content-Length; `send_only` bytes of the body, then close (a fault)."""
        headers = {**(headers or {}), **self._take_fault("headers", {})}
        body_fault = self._take_body_fault() if self.command == "GET" else None
        if body_fault is not None and body_fault[0] == "endless_body":
            status = 200
        self._status = status
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        if body_fault is None or body_fault[0] == "trickle_seconds":
            self.send_header("Content-Length", str(len(body)))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command == "HEAD":
            return
        if body_fault is not None:
            return self._send_hostile_body(body_fault, body)
        self.wfile.write(body if send_only is None else body[:send_only])
        if send_only is not None:
            self.close_connection = True

    def _take_fault(self, kind, default=None):
        value = self.hub.faults.take(kind, self.path)
        if value is None:
            return default
        self._fired.append(kind)
        return value

    def _take_body_fault(self):
        for kind in ("oversize_body", "endless_body", "trickle_seconds"):
            value = self._take_fault(kind)
            if value is not None:
                return kind, value
        return None

    def _send_hostile_body(self, fault, body):
        """Writes until done or until the client hangs up (BrokenPipe ends the handler)."""
        kind, value = fault
        self.close_connection = True
        if kind == "trickle_seconds":
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(float(value))
        elif kind == "oversize_body":
            chunk = b"x" * 65536
            for start in range(0, int(value), len(chunk)):
                self.wfile.write(chunk[:int(value) - start])
        else:
            chunk = b"0," * 32768
            self.wfile.write(b"[")
            while True:
                self.wfile.write(chunk)

    def _send_json(self, status, obj, headers=None, content_type="application/json"):
        self._send(status, json.dumps(obj).encode(), headers, content_type)

    def _send_error(self, error):
        headers = {"X-Error-Message": error.message, **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        self._send_json(error.status, error.body, headers)

    def _json_body(self, body):
        try:
            return json.loads(body or b"{}")
        except ValueError:
            raise HubError(400, "request body is not valid JSON")

    def _bearer_token(self):
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else None

    def _require_write_token(self):
        token = self._bearer_token()
        if token is None:
            raise HubError(401, "Unauthorized: a token is required")
        if token not in self.hub.tokens:
            raise HubError(401, "Invalid credentials in Authorization header")

    # ---- routing

    def _control(self, segments, body):
        route = (self.command, "/".join(segments))
        if route == ("POST", "faults"):
            self.hub.faults.add(self._json_body(body))
            self._send_json(200, {"ok": True})
        elif route == ("POST", "reset_faults"):
            self.hub.faults.clear()
            self._send_json(200, {"ok": True})
        elif route == ("GET", "log"):
            self._send_json(200, self.hub.log.entries())
        elif route == ("POST", "reset_log"):
            self.hub.log.clear()
            self._send_json(200, {"ok": True})
        else:
            raise HubError(404, f"no control endpoint {self.command} /_mock/{route[1]}")

    def _serve(self, raw_segments, segments, query, body):
        delay = self.hub.faults.take("delay_seconds", self.path)
        if delay is not None:
            self._fired.append("delay_seconds")
            time.sleep(float(delay))
        status = self.hub.faults.take("status", self.path)
        if status is not None:
            self._fired.append("status")
            raise HubError(int(status), "injected fault")
        params = {key: values[-1] for key, values in parse_qs(query).items()}
        head = segments[0]
        if head == "_cdn":
            return self._cdn(segments[1:])
        if head == "_lfs":
            return self._lfs_transfer(segments[1:], params, body)
        if head == "api":
            return self._api(raw_segments, segments[1:], query, params, body)
        return self._web(raw_segments, segments, query, body)

    def _api(self, raw_segments, segments, query, params, body):
        if (self.command, segments[:2]) == ("POST", ["repos", "create"]):
            return self._create_repo(self._json_body(body))
        if len(segments) < 3 or segments[0] not in REPO_TYPES_BY_PLURAL:
            raise HubError(404, "Not Found")
        route = RepoRoute(REPO_TYPES_BY_PLURAL[segments[0]], raw_segments, id_index=3)
        action, rest = (segments[3], segments[4:]) if len(segments) > 3 else ("revision", ["main"])
        handlers = {
            ("GET", "revision"): lambda: self._repo_info(route, query, "/".join(rest), params),
            ("GET", "tree"): lambda: self._tree(route, query, rest, params),
            ("POST", "preupload"): lambda: self._preupload(route, query, rest, self._json_body(body)),
            ("POST", "commit"): lambda: self._commit(route, query, rest, params, body),
        }
        handler = handlers.get((self.command, action))
        if handler is None or not rest:
            raise HubError(404, "Not Found")
        handler()

    def _web(self, raw_segments, segments, query, body):
        repo_type, id_index = ("dataset", 2) if segments[0] == "datasets" else ("model", 1)
        rest = segments[id_index + 1:]
        if len(rest) < 2:
            raise HubError(404, "Not Found")
        if rest[0] == "resolve" and self.command in ("GET", "HEAD") and len(rest) >= 3:
            return self._resolve(RepoRoute(repo_type, raw_segments, id_index), query, rest[1], "/".join(rest[2:]))
        if rest == ["info", "lfs", "objects", "batch"] and raw_segments[id_index + 1].endswith(".git"):
            route = RepoRoute(repo_type, raw_segments, id_index, suffix=".git")
            return self._lfs_batch(route, query, self._json_body(body))
        raise HubError(404, "Not Found")

    # ---- repos and revisions

    def _open_repo(self, route, query):
        """The repo.json of an existing repo; raises RepoNotFound, or a redirect if it was renamed."""
        repo = self.store.read_repo(route.repo_type, route.repo_id)
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        if "renamed_to" in repo:
            raise Redirect(route.moved_to(repo["renamed_to"], query))
        return repo

    def _open_commit(self, route, repo, revision):
        """(commit id, commit record) of `revision`; raises RevisionNotFound."""
        commit = self.store.resolve_revision(route.repo_type, route.repo_id, repo, revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit, self.store.read_commit(route.repo_type, route.repo_id, commit)

    def _check_gate(self, repo):
        if not repo["gated"]:
            return
        token = self._bearer_token()
        if token is None:
            raise HubError(401, "Access to this gated repo requires a token", "GatedRepo")
        if token not in self.hub.tokens:
            raise HubError(403, "Access to this gated repo is restricted: your token is not authorized", "GatedRepo")

    def _repo_url(self, repo_type, repo_id):
        prefix = "" if repo_type == "model" else "datasets/"
        return f"{self.hub.url}/{prefix}{repo_id}"

    # ---- downloads

    def _repo_info(self, route, query, revision, params):
        repo = self._open_repo(route, query)
        commit, record = self._open_commit(route, repo, revision)
        with_blobs = params.get("blobs", "").lower() in ("1", "true")
        siblings = [self._sibling(path, sha256, with_blobs) for path, sha256 in sorted(record["files"].items())]
        siblings += self._hostile_siblings()
        info = {
            "id": route.repo_id, "author": route.repo_id.split("/")[0],
            "sha": commit, "lastModified": record["date"], "createdAt": repo["created_at"], "private": False,
            "gated": "auto" if repo["gated"] else False, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "siblings": siblings,
        }
        if route.repo_type == "model":
            info["modelId"] = route.repo_id
        self._send_json(200, info)

    def _sibling(self, path, sha256, with_blobs):
        if not with_blobs:
            return {"rfilename": path}
        described = self.store.describe(path, sha256)
        sibling = {"rfilename": path, "size": described["size"], "blobId": described["blob_id"]}
        if described["lfs"]:
            sibling["lfs"] = described["lfs"]
        return sibling

    def _hostile_siblings(self):
        extra = self.hub.faults.take("siblings", self.path)
        if extra is None:
            return []
        self._fired.append("siblings")
        return [{"rfilename": name} for name in extra]

    def _tree(self, route, query, rest, params):
        repo = self._open_repo(route, query)
        _, record = self._open_commit(route, repo, rest[0])
        folder = "/".join(rest[1:]).strip("/")
        prefix = f"{folder}/" if folder else ""
        recursive = params.get("recursive", "").lower() in ("1", "true")
        files = {path: sha for path, sha in record["files"].items() if path.startswith(prefix)}
        if folder and not files:
            raise HubError(404, f"{folder} does not exist", "EntryNotFound")
        entries = {}
        for path, sha256 in files.items():
            parts = path[len(prefix):].split("/")
            for depth in range(1, len(parts)):
                directory = prefix + "/".join(parts[:depth])
                if recursive or depth == 1:
                    entries.setdefault(directory, self._directory_entry(directory, files))
            if recursive or len(parts) == 1:
                entries[path] = self._file_entry(path, sha256)
        self._send_json(200, [entries[path] for path in sorted(entries)])

    def _file_entry(self, path, sha256):
        described = self.store.describe(path, sha256)
        entry = {"type": "file", "oid": described["blob_id"], "size": described["size"], "path": path}
        if described["lfs"]:
            lfs = described["lfs"]
            entry["lfs"] = {"oid": lfs["sha256"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
        return entry

    @staticmethod
    def _directory_entry(directory, files):
        inside = {path: sha for path, sha in files.items() if path.startswith(directory + "/")}
        return {"type": "directory", "oid": commit_id(inside), "size": 0, "path": directory}

    def _resolve(self, route, query, revision, path):
        repo = self._open_repo(route, query)
        self._check_gate(repo)
        commit, record = self._open_commit(route, repo, revision)
        if path not in record["files"]:
            raise HubError(404, f"{path} does not exist at {revision}", "EntryNotFound", {"X-Repo-Commit": commit})
        sha256 = record["files"][path]
        described = self.store.describe(path, sha256)
        if described["lfs"] is None:
            headers = {"X-Repo-Commit": commit, "ETag": f'"{described["blob_id"]}"'}
            return self._send_file(self.store.read_object(sha256), headers)
        self._send(302, b"", {
            "Location": f"{self.hub.cdn_url}/_cdn/{sha256}/{quote(path)}",
            "X-Repo-Commit": commit,
            "X-Linked-Etag": f'"{sha256}"',
            "X-Linked-Size": str(described["size"]),
            "ETag": f'"{described["blob_id"]}"',
        })

    def _cdn(self, segments):
        if self.command not in ("GET", "HEAD") or not segments or not self.store.has_object(segments[0]):
            raise HubError(404, "NoSuchKey")
        sha256 = segments[0]
        headers = {"ETag": f'"{sha256}"'}
        if len(segments) > 1:
            headers["Content-Disposition"] = f'attachment; filename="{segments[-1]}";'
        self._send_file(self.store.read_object(sha256), headers)

    def _send_file(self, data, headers):
        """Send file bytes honouring Range (206/416) and a pending drop_after_bytes fault."""
        headers = {**headers, "Accept-Ranges": "bytes"}
        total = len(data)
        byte_range = _parse_byte_range(self.headers.get("Range"), total)
        status = 200
        if byte_range is not None:
            start, end = byte_range
            status, data = 206, data[start:end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{total}"
        send_only = None
        if self.command == "GET":
            send_only = self.hub.faults.take("drop_after_bytes", self.path)
            if send_only is not None:
                self._fired.append("drop_after_bytes")
        self._send(status, data, headers, "application/octet-stream", send_only)

    # ---- uploads

    def _create_repo(self, payload):
        self._require_write_token()
        name, org = payload.get("name") or "", payload.get("organization")
        if org is None and "/" in name:
            org, name = name.split("/", 1)
        repo_type = payload.get("type") or "model"
        if not org or not name or "/" in name or repo_type not in REPO_TYPE_DIRS:
            raise HubError(400, "expected a name, an organization and a type of model or dataset")
        repo_id = f"{org}/{name}"
        url = self._repo_url(repo_type, repo_id)
        with self.hub.write_lock:
            if self.store.read_repo(repo_type, repo_id) is not None:
                message = f"You already created this {repo_type} repo"
                raise HubError(409, message, body={"error": message, "url": url})
            repo = _new_repo()
            repo["branches"]["main"] = self.store.write_commit(repo_type, repo_id, {}, None, "initial commit")
            self.store.write_repo(repo_type, repo_id, repo)
        self._send_json(200, {"url": url, "name": repo_id, "id": repo_id})

    def _preupload(self, route, query, rest, payload):
        self._require_write_token()
        repo = self._open_repo(route, query)
        commit, record = self._open_commit(route, repo, "/".join(rest))
        answers = []
        for file in payload.get("files", []):
            path, size = file["path"], int(file["size"])
            mode = "lfs" if is_lfs(path, size) else "regular"
            answers.append({"path": path, "uploadMode": mode, "shouldIgnore": False,
                            "oid": self._remote_oid(path, record["files"].get(path))})
        self._send_json(200, {"files": answers, "commitOid": commit})

    def _remote_oid(self, path, sha256):
        """The oid huggingface_hub compares with its local one: sha256 for LFS files, git sha1 else."""
        if sha256 is None:
            return None
        described = self.store.describe(path, sha256)
        return sha256 if described["lfs"] else described["blob_id"]

    def _lfs_batch(self, route, query, payload):
        self._require_write_token()
        self._open_repo(route, query)
        if payload.get("operation") != "upload":
            raise HubError(400, "the mock LFS batch API only supports the upload operation")
        objects = [self._lfs_batch_object(obj["oid"], obj["size"]) for obj in payload.get("objects", [])]
        self._send_json(200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"},
                        content_type="application/vnd.git-lfs+json")

    def _lfs_batch_object(self, oid, size):
        answer = {"oid": oid, "size": size, "authenticated": True}
        if not SHA256_ID.fullmatch(oid) or not isinstance(size, int) or size < 0:
            answer["error"] = {"code": 422, "message": "oid must be a sha256 and size a non-negative integer"}
        elif not self.store.has_object(oid):
            answer["actions"] = {
                "upload": {"href": f"{self.hub.url}/_lfs/upload/{oid}?size={size}", "expires_in": 3600},
                "verify": {"href": f"{self.hub.url}/_lfs/verify", "expires_in": 3600},
            }
        return answer

    def _lfs_transfer(self, segments, params, body):
        if self.command == "PUT" and len(segments) == 2 and segments[0] == "upload":
            oid = segments[1]
            if hashlib.sha256(body).hexdigest() != oid:
                raise HubError(400, "uploaded content does not match its sha256 oid")
            if str(len(body)) != params.get("size"):
                raise HubError(400, f"uploaded {len(body)} bytes, expected {params.get('size')}")
            self.store.put_object(body)
            return self._send(200, b"", content_type="text/plain")
        if self.command == "POST" and segments == ["verify"]:
            self._require_write_token()
            payload = self._json_body(body)
            oid = str(payload.get("oid"))
            if not self.store.has_object(oid) or self.store.object_path(oid).stat().st_size != payload.get("size"):
                raise HubError(404, f"object {oid} of size {payload.get('size')} was not uploaded")
            return self._send_json(200, {"success": True})
        raise HubError(404, "Not Found")

    def _commit(self, route, query, rest, params, body):
        self._require_write_token()
        repo = self._open_repo(route, query)
        branch = "/".join(rest)
        if params.get("create_pr") == "1":
            raise HubError(400, "the mock hub does not support pull requests")
        if branch not in repo["branches"]:
            self._open_commit(route, repo, branch)  # RevisionNotFound for an unknown revision
            raise HubError(400, f"can only commit to a branch, not to {branch}")
        with self.hub.write_lock:
            repo = self.store.read_repo(route.repo_type, route.repo_id)
            head = repo["branches"][branch]
            files = dict(self.store.read_commit(route.repo_type, route.repo_id, head)["files"])
            header = self._apply_commit_lines(files, body)
            parent = header.get("parentCommit")
            if parent is not None and not head.startswith(parent):
                raise HubError(412, f"parentCommit {parent} is not the head of {branch} ({head})")
            message = header.get("summary") or "commit"
            commit = self.store.write_commit(route.repo_type, route.repo_id, files, head, message)
            repo["branches"][branch] = commit
            self.store.write_repo(route.repo_type, route.repo_id, repo)
        self._send_json(200, {
            "success": True, "commitOid": commit, "commitMessage": message, "hookOutput": "",
            "commitUrl": f"{self._repo_url(route.repo_type, route.repo_id)}/commit/{commit}",
            "pullRequestUrl": None,
        })

    def _apply_commit_lines(self, files, body):
        """Apply the ndjson operations of a commit body to `files` ({path: sha256}); return the header."""
        header = {}
        for line in body.splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key, value = item["key"], item["value"]
            except (ValueError, KeyError, TypeError):
                raise HubError(400, f"malformed commit line: {line[:200]!r}")
            if key == "header":
                header = value
            elif key == "file":
                files[value["path"]] = self.store.put_object(self._file_content(value))
            elif key == "lfsFile":
                files[value["path"]] = self._stored_lfs_oid(value)
            elif key == "deletedFile":
                if files.pop(value["path"], None) is None:
                    raise HubError(404, f"A file with this name doesn't exist: {value['path']}", "EntryNotFound")
            elif key == "deletedFolder":
                folder = value["path"].rstrip("/") + "/"
                for path in [path for path in files if path.startswith(folder)]:
                    del files[path]
            else:
                raise HubError(400, f"unknown commit operation {key!r}")
        return header

    @staticmethod
    def _file_content(value):
        if value.get("encoding", "utf-8") == "base64":
            return base64.b64decode(value["content"])
        return value["content"].encode()

    def _stored_lfs_oid(self, value):
        oid = value["oid"]
        if not self.store.has_object(oid):
            raise HubError(422, f"LFS object {oid} for {value['path']} was never uploaded")
        size = value.get("size")
        if size is not None and self.store.object_path(oid).stat().st_size != size:
            raise HubError(422, f"LFS object {oid} does not have size {size}")
        return oid


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer without the reverse DNS lookup of HTTPServer.server_bind."""

    daemon_threads = True

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class MockHub:
    """The mock Hub over the storage at `root`, on `host` (127.0.0.1 unless told).

    `tokens`: the valid bearer tokens. `port`: 0 picks a free one. `cdn_host`: the host name used in
    the absolute redirect to LFS content; it must name `host` but differ from it, so that clients
    treat it as the separate CDN host it stands for.
    """

    def __init__(self, root, tokens=DEFAULT_TOKENS, port=0, cdn_host="localhost", host="127.0.0.1"):
        self.store = Store(root)
        self.tokens = frozenset(tokens)
        self.faults = FaultBook()
        self.log = RequestLog()
        self.write_lock = threading.Lock()
        self._server = _Server((host, port), HubHandler)
        self._server.hub = self
        self.port = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self.cdn_url = f"http://{cdn_host}:{self.port}"
        self._thread = None

    def start(self):
        """Serve in a background thread; returns the base URL."""
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="mock-hub", daemon=True)
        self._thread.start()
        return self.url

    def stop(self):
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def inject(self, spec):
        """Same as POST /_mock/faults."""
        self.faults.add(spec)

    def requests(self):
        """Same as GET /_mock/log."""
        return self.log.entries()


def _exit_cleanly(signum, frame):
    raise SystemExit(0)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Mock Hugging Face Hub server (see the module docstring).")
    parser.add_argument("--root", required=True, help="storage directory (make_repo layout)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port on --host; 0 picks a free one")
    parser.add_argument("--tokens", default=",".join(DEFAULT_TOKENS), help="comma-separated valid tokens")
    parser.add_argument("--cdn-host", default="localhost", help="host name of the LFS redirect target")
    args = parser.parse_args(argv)
    hub = MockHub(args.root, tokens=[t for t in args.tokens.split(",") if t], port=args.port,
                  cdn_host=args.cdn_host, host=args.host)
    signal.signal(signal.SIGTERM, _exit_cleanly)
    print(f"READY {hub.start()}", flush=True)
    try:
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()


if __name__ == "__main__":
    main()
