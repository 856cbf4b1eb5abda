"""bench/long_context_probe.py's proxy (issue 31): the ballast that stands in for the removed decoder
layers, against a hand computation, the ballast process's lifetime, and the GPU capacity emulation
(gpu_ballast.py's extra bytes; the capacity in every key and setting). No GPU: gpu_ballast.py's
arithmetic is imported (torch on the CPU), and the process is replaced by a stand-in that prints its
JSON line and sleeps."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_ballast  # noqa: E402
import long_context_probe as probe  # noqa: E402
import shapes  # noqa: E402

H100_GIB = 79.19
H100_BYTES = 85_029_615_043  # round(79.19 x 2^30)
H200_TOTAL = 150_109_880_320  # about 139.8 GiB (an H200)

# Qwen3-8B per layer (hidden 4096, intermediate 12288, 32 heads and 8 kv heads of 128):
#   q, o 4096 x 4096 = 16,777,216 each; k, v 4096 x 1024 = 4,194,304 each; gate, up, down 4096 x 12288 =
#   50,331,648 each: 192,937,984 projection weights. Norms: 2 x 4096 + q/k norms 2 x 128 = 8,448 (bf16).
#   LoRA r 16: 16 x (8192 + 5120 + 5120 + 8192 + 3 x 16384) = 1,212,416 parameters x 16 bytes = 19,398,656.
#   NF4 of a weight of n: n/2 + n/64 + 4 x n/64/256 -> q, o 8,654,848; k, v 2,163,712; gate, up, down 25,964,544.
# K = 2 removes 34 layers.
QWEN3_8B_LAYER_BF16 = 2 * 192_937_984 + 2 * 8_448 + 19_398_656
QWEN3_8B_LAYER_NF4 = 2 * 8_654_848 + 2 * 2_163_712 + 3 * 25_964_544 + 2 * 8_448 + 19_398_656


def qwen3_8b():
    config_class, _, config = shapes.SHAPES["qwen3-8b"]
    return config, config_class.model_type


def test_qwen3_8b_ballast_at_two_layers_is_the_hand_computation():
    config, model_type = qwen3_8b()
    assert probe.removed_layers_bytes(config, model_type, "lora", 2) == 34 * QWEN3_8B_LAYER_BF16 == 13_779_911_680
    assert probe.removed_layers_bytes(config, model_type, "qlora", 2) == 34 * QWEN3_8B_LAYER_NF4 == 4_044_174_336


def test_no_ballast_at_full_depth_and_no_depth_beyond_it():
    config, model_type = qwen3_8b()
    assert probe.removed_layers_bytes(config, model_type, "lora", 36) == 0
    for layers in (0, 37):
        with pytest.raises(ValueError, match="layers of a 36-layer model"):
            probe.removed_layers_bytes(config, model_type, "lora", layers)


def test_nf4_bytes_rounds_blocks_up_as_bitsandbytes():
    # 65 values: 33 bytes of codes, 2 absmax blocks, 1 nested fp32 absmax.
    assert probe.nf4_bytes(65) == 33 + 2 + 4


def test_a_model_type_without_layer_arithmetic_is_refused():
    config_class, _, config = shapes.SHAPES["qwen3-30b-a3b-8l"]
    with pytest.raises(ValueError, match="no layer arithmetic"):
        probe.removed_layers_bytes(config, config_class.model_type, "lora", 2)


@pytest.fixture
def fake_ballast(tmp_path, monkeypatch):
    """gpu_ballast.py's stand-in: writes its pid and its arguments (argv.json), prints its JSON line,
    sleeps until killed."""
    (tmp_path / "gpu_ballast.py").write_text(
        "import json, os, sys, time\n"
        "here = os.path.dirname(__file__)\n"
        "open(os.path.join(here, 'argv.json'), 'w').write(json.dumps(sys.argv[1:]))\n"
        "open(os.path.join(here, 'pid'), 'w').write(str(os.getpid()))\n"
        "print(json.dumps({'ballast_bytes': int(sys.argv[2]), 'context_bytes': 0}), flush=True)\n"
        "time.sleep(600)\n")
    monkeypatch.setattr(probe, "HERE", str(tmp_path))
    return tmp_path


def gone(pid):
    """Whether `pid` has exited (and been reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_ballast_process_is_killed_when_the_attempt_raises(fake_ballast):
    with pytest.raises(subprocess.TimeoutExpired):
        with probe.ballast(1000, str(fake_ballast / "ballast.log")) as held:
            assert held == {"ballast_bytes": 1000, "context_bytes": 0}
            pid = int((fake_ballast / "pid").read_text())
            assert not gone(pid)
            raise subprocess.TimeoutExpired("attempt", 1)
    assert gone(pid)


def test_no_ballast_process_for_zero_bytes(fake_ballast):
    with probe.ballast(0, str(fake_ballast / "ballast.log")) as held:
        assert held is None
    assert not (fake_ballast / "pid").exists()


def test_a_zero_byte_ballast_with_a_gpu_capacity_still_starts_with_the_flag(fake_ballast):
    with probe.ballast(0, str(fake_ballast / "ballast.log"), capacity=H100_BYTES) as held:
        assert held == {"ballast_bytes": 0, "context_bytes": 0}
        pid = int((fake_ballast / "pid").read_text())
        assert json.loads((fake_ballast / "argv.json").read_text()) == [
            "--bytes", "0", "--gpu_capacity", str(H100_BYTES)]
    assert gone(pid)


def test_the_capacity_in_gib_becomes_bytes():
    assert probe.capacity_bytes(H100_GIB) == H100_BYTES
    assert probe.capacity_bytes(None) is None


def test_the_extra_bytes_leave_the_others_a_card_of_the_capacity():
    assert gpu_ballast.capacity_extra_bytes(H200_TOTAL, H100_BYTES) == H200_TOTAL - H100_BYTES == 65_080_265_277
    assert gpu_ballast.capacity_extra_bytes(H100_BYTES, H100_BYTES) == 0
    assert gpu_ballast.capacity_extra_bytes(H100_BYTES, H200_TOTAL) == 0  # the card is smaller: nothing extra
    assert gpu_ballast.capacity_extra_bytes(H200_TOTAL, None) == 0
    with pytest.raises(ValueError, match="capacity of 0 bytes"):
        gpu_ballast.capacity_extra_bytes(H200_TOTAL, 0)


def test_the_context_counts_against_the_bytes_and_the_extra_once():
    context = 500 << 20
    extra = H200_TOTAL - H100_BYTES
    # Layers' bytes + the capacity's extra, less the context already held.
    assert gpu_ballast.allocation_bytes(4_044_174_336, context, extra) == 4_044_174_336 + extra - context
    # Full depth: the process as a whole holds exactly the extra, so the others find H100_BYTES free.
    assert gpu_ballast.allocation_bytes(0, context, extra) + context == extra
    assert gpu_ballast.allocation_bytes(0, context, 0) == 0


def llama_probe(tmp_path, *flags, tool="finetune"):
    args = probe.parse_args(["--finetune", "finetune", "--state", str(tmp_path / "state.json"),
                             "--shapes", "llama-3.1-8b", "--variants", "qlora", *flags])
    return probe.Probe(args, {}, tool, "llama-3.1-8b", "qlora")


def test_the_capacity_is_in_the_key_and_the_setting(tmp_path):
    cut = llama_probe(tmp_path, "--layers", "2", "--gpu_capacity_gib", "79.19")
    assert cut.key.startswith("finetune/llama-3.1-8b/qlora/2of32L+") and cut.key.endswith("GiB@79.19GiB")
    assert cut.setting()["gpu_capacity_gib"] == H100_GIB
    full = llama_probe(tmp_path, "--gpu_capacity_gib", "79.19")
    assert full.key == "finetune/llama-3.1-8b/qlora@79.19GiB" and full.ballast_bytes == 0
    card = llama_probe(tmp_path, "--layers", "2")
    assert card.key == cut.key[:-len("@79.19GiB")] and card.setting()["gpu_capacity_gib"] is None
    assert probe.probe_key("unsloth", "llama-3.1-8b", "qlora", 32, 0, 79.1875) == "unsloth/llama-3.1-8b/qlora@79.1875GiB"


def test_a_capacity_that_is_not_positive_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        llama_probe(tmp_path, "--gpu_capacity_gib", "0")


def test_lengths_are_tried_longest_first_until_one_trains(tmp_path):
    """--lengths: the first length (longest first) that trains is the longest; an out-of-memory
    failure goes on to the next; any other failure, or a list that all ran out of memory, settles
    at 0. The attempts come from the state (Probe.run reads a length's recorded result first)."""
    deadline = float("inf")
    cut = llama_probe(tmp_path, "--layers", "2", "--lengths", "589824,622592,557056")
    oom, ok = {"ok": False, "oom": True, "error": "out of memory"}, {"ok": True, "tokens_per_s": 1.0}
    cut.attempts.update({"622592": oom, "589824": ok, "557056": ok})
    assert cut.search(deadline) == (589824, True)
    cut.attempts.clear()
    cut.attempts.update({"622592": oom, "589824": oom, "557056": oom})
    assert cut.search(deadline) == (0, True)
    cut.attempts.clear()
    cut.attempts.update({"622592": {"ok": False, "error": "no such flag"}, "589824": ok})
    assert cut.search(deadline) == (0, True)


def test_lengths_must_be_positive_token_counts(tmp_path):
    with pytest.raises(SystemExit):
        llama_probe(tmp_path, "--lengths", "589824,abc")
    with pytest.raises(SystemExit):
        llama_probe(tmp_path, "--lengths", "0")
    assert llama_probe(tmp_path, "--lengths", "589824,557056").args.lengths == [589824, 557056]
