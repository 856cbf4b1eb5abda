"""bench/long_context_probe.py's proxy (issue 31): the ballast that stands in for the removed decoder
layers, against a hand computation, and the ballast process's lifetime. No GPU: gpu_ballast.py is
replaced by a stand-in that prints its JSON line and sleeps."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import long_context_probe as probe  # noqa: E402
import shapes  # noqa: E402

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
    """gpu_ballast.py's stand-in: prints its JSON line, writes its pid, sleeps until killed."""
    (tmp_path / "gpu_ballast.py").write_text(
        "import json, os, sys, time\n"
        "open(os.path.join(os.path.dirname(__file__), 'pid'), 'w').write(str(os.getpid()))\n"
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
