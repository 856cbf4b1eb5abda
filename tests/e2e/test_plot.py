"""Loss curves in a real browser: two tiny training runs each leave OUTPUT_DIR/report.html, and
`finetune plot RUN_A RUN_B --out cmp.html` overlays them. Headless Chromium renders the page: its
screenshot is not blank, and the DOM it parsed has one polyline per run in each chart, with axis
ranges equal to the extremes of the runs' metrics.jsonl values."""
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest
from PIL import Image

from conftest import run_finetune
import tiny_models

SERIES = ["loss", "eval_loss", "lr", "grad_norm", "tokens_per_s"]
X_AXES = ["step", "tokens"]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("no chromium on PATH: scripts/setup.sh installs Debian's chromium package")


def browser(*args):
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           *args], capture_output=True, text=True, timeout=120)


class ChartCollector(HTMLParser):
    """The charts of a page as the browser serialised its DOM: attributes and polyline runs."""

    def __init__(self):
        super().__init__()
        self.charts, self.legend_items, self._chart = [], 0, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "svg" and "chart" in (attrs.get("class") or ""):
            self._chart = {"attrs": attrs, "runs": [], "points": []}
            self.charts.append(self._chart)
        elif tag == "polyline" and self._chart is not None:
            self._chart["runs"].append(attrs["data-run"])
            self._chart["points"].append(len(attrs["points"].split()))
        elif tag == "li":
            self.legend_items += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self._chart = None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plot")
    tiny_models.make_model("qwen2", root / "base")
    tiny_models.write_jsonl(root / "train.jsonl", tiny_models.make_tokenized_rows(24, seed=1, completion_only=True))
    tiny_models.write_jsonl(root / "eval.jsonl", tiny_models.make_tokenized_rows(6, seed=2, completion_only=True))
    dirs = []
    for name, lr in (("run-fast", 5e-3), ("run-slow", 1e-3)):
        out = root / name
        run_finetune(["--model_name", root / "base", "--dataset", root / "train.jsonl", "--eval_dataset",
                      root / "eval.jsonl", "--eval_steps", 3, "--output_dir", out, "--max_steps", 6,
                      "--per_device_train_batch_size", 2, "--gradient_accumulation_steps", 1, "--learning_rate", lr,
                      "--warmup_steps", 2, "--dtype", "float32", "--device", "cpu", "--use_gradient_checkpointing",
                      "false"])
        dirs.append(out)
    return root, dirs


def metrics(run_dir):
    return [json.loads(line) for line in open(run_dir / "metrics.jsonl")]


def test_every_run_leaves_a_report(runs):
    _, dirs = runs
    for run_dir in dirs:
        page = (run_dir / "report.html").read_text()
        collector = ChartCollector()
        collector.feed(page)
        assert {c["attrs"]["data-metric"] for c in collector.charts} == set(SERIES)
        assert all(c["runs"] == [run_dir.name] for c in collector.charts)


def test_plot_overlays_runs_and_the_browser_draws_them(runs):
    root, dirs = runs
    out = root / "cmp.html"
    proc = run_finetune(["plot", *dirs, "--out", out])
    assert proc.stdout.strip() == str(out)

    dom = browser("--dump-dom", f"file://{out}")
    assert dom.returncode == 0, dom.stderr
    collector = ChartCollector()
    collector.feed(dom.stdout)
    assert collector.legend_items == 2
    assert len(collector.charts) == len(SERIES) * len(X_AXES)
    lines = {run_dir.name: metrics(run_dir) for run_dir in dirs}
    for chart in collector.charts:
        metric, x_key = chart["attrs"]["data-metric"], chart["attrs"]["data-x"]
        assert chart["runs"] == [d.name for d in dirs]  # one polyline per run, legend order
        xs = [line[x_key] for run in lines.values() for line in run if line.get(metric) is not None]
        ys = [line[metric] for run in lines.values() for line in run if line.get(metric) is not None]
        assert float(chart["attrs"]["data-x-min"]) == min(xs) and float(chart["attrs"]["data-x-max"]) == max(xs)
        assert float(chart["attrs"]["data-y-min"]) == min(ys) and float(chart["attrs"]["data-y-max"]) == max(ys)
        for name, count in zip(chart["runs"], chart["points"]):
            assert count == sum(1 for line in lines[name] if line.get(metric) is not None)

    shot = root / "shot.png"
    rendered = browser("--window-size=1200,1400", f"--screenshot={shot}", f"file://{out}")
    assert rendered.returncode == 0 and shot.exists(), rendered.stderr
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    colours = {tuple(p) for p in pixels[:: max(1, len(pixels) // 200000)]}
    assert len(colours) > 20, f"screenshot looks blank: {len(colours)} colours"
    # The first two line colours (report/html_report.cpp) are on screen.
    for colour in ((0x4E, 0x79, 0xA7), (0xF2, 0x8E, 0x2B)):
        assert np.any(np.all(np.abs(pixels.astype(int) - colour) <= 8, axis=1)), f"no pixel of colour {colour}"


def test_plot_errors(runs):
    root, _ = runs
    proc = run_finetune(["plot", root / "no-such-run"], check=False)
    assert proc.returncode == 1 and "no-such-run" in proc.stderr and "metrics.jsonl" in proc.stderr
    proc = run_finetune(["plot"], check=False)
    assert proc.returncode == 2 and "at least one run directory" in proc.stderr
    proc = run_finetune(["plot", root, "--learning_rate", "1"], check=False)
    assert proc.returncode == 2 and "not an option of `finetune plot`" in proc.stderr
    assert run_finetune(["plot", "--help"]).stdout.startswith("usage: finetune plot")
