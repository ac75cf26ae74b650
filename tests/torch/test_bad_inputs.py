"""Each bad input of a torch run is one line on stderr naming the key or file, exit 2, no traceback."""

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_cli

pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # each starts run.py with torch (~10-20 s on a shared CPU)
SFT, DPO = ["recipe=sft_torch_cpu"], ["recipe=dpo_torch_cpu"]


def tiny_model_copy(tmp_path: Path, drop: tuple[str, ...] = (), no_template: bool = False) -> Path:
    from framework.models.tiny import resolve_model_dir
    from tests.conftest import compose_config

    cfg = compose_config(SFT)
    source = Path(resolve_model_dir(dict(cfg.model), REPO_ROOT / "outputs" / "cache" / "models"))
    target = tmp_path / "model"
    shutil.copytree(source, target)
    for name in drop:
        (target / name).unlink(missing_ok=True)
    if no_template:
        (target / "chat_template.jinja").unlink(missing_ok=True)
        config_file = target / "tokenizer_config.json"
        config = json.loads(config_file.read_text())
        config.pop("chat_template", None)
        config_file.write_text(json.dumps(config))
    return target


def one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    return lines[0]


def run(tmp_path, overrides):
    return run_cli([*overrides, f"hydra.run.dir={tmp_path}/run", "progress=false"])


def test_preference_file_without_rejected(tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "2+2?", "chosen": "4"}) + "\n")
    line = one_line_error(run(tmp_path, [*DPO, "data.source=local", f"data.path={data}"]))
    assert f"{data}:1" in line and "rejected" in line


def test_model_dir_without_tokenizer(tmp_path):
    model = tiny_model_copy(tmp_path, drop=("tokenizer.json", "tokenizer_config.json"))
    line = one_line_error(run(tmp_path, [*SFT, f"model.path={model}", "model.random_init=false"]))
    assert str(model) in line and "no tokenizer" in line


def test_tokenizer_without_chat_template(tmp_path):
    model = tiny_model_copy(tmp_path, no_template=True)
    line = one_line_error(run(tmp_path, [*SFT, f"model.path={model}", "model.random_init=false"]))
    assert "no chat template" in line


def test_lora_target_the_model_lacks(tmp_path):
    line = one_line_error(run(tmp_path, [*SFT, "sft.lora.target_modules=[q_proj,query_key_value]"]))
    assert line.startswith("error: sft.lora.target_modules: 'query_key_value' is not a linear module")
    assert "q_proj" in line and "gate_proj" in line  # what the model has


def test_dpo_loss_type_trl_does_not_know(tmp_path):
    line = one_line_error(run(tmp_path, [*DPO, "dpo.loss_type=exo_pair"]))
    assert "dpo.loss_type" in line and "sigmoid" in line


def test_label_smoothing_with_the_sigmoid_loss(tmp_path):
    line = one_line_error(run(tmp_path, [*DPO, "dpo.label_smoothing=0.1"]))
    assert line.startswith("error: dpo.label_smoothing:") and "robust" in line


def test_a_max_seq_length_every_prompt_fills(tmp_path):
    """TRL drops the rows left no completion token; none left was torch's `num_samples=0` ValueError, exit 1."""
    line = one_line_error(run(tmp_path, [*SFT, "sft.max_seq_length=32", "sft.steps=1"]))
    assert line.startswith("error: sft.max_seq_length: 32 tokens leave no training record")


SAME = {"prompt": "What is 2+2?", "chosen": "The answer is four, because two plus two makes four in every base above "
        "four.", "rejected": "The answer is four, because I said so and that is all."}
DIFFERENT = {"prompt": "What is 3+3?", "chosen": "Six.", "rejected": "Seven, I think."}


def pair_file(tmp_path, rows) -> Path:
    """Pairs whose chosen and rejected share their first words: 6 completion tokens cannot tell SAME's apart."""
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_dpo_pairs_that_truncate_to_the_same_tokens(tmp_path):
    """Such a pair has a zero loss gradient: all of them is one line before training, some a warning with the count
    (was: exit 0 after steps of loss 0.6931, rewards 0, without a word)."""
    short = [*DPO, "data.source=local", "dpo.max_completion_length=6", "dpo.steps=1", "dpo.eval.every=0"]
    data = pair_file(tmp_path, [SAME] * 8)
    line = one_line_error(run(tmp_path, [*short, f"data.path={data}"]))
    assert line == (f"error: dpo.max_completion_length: 8 of 8 training pairs of {data} have the same chosen and "
                    f"rejected tokens once cut to 6 tokens: the run would train on nothing; raise "
                    f"dpo.max_completion_length")
    data = pair_file(tmp_path, [SAME] * 6 + [DIFFERENT] * 2)
    proc = run(tmp_path / "some", [*short, f"data.path={data}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"dpo.max_completion_length: 6 of 8 training pairs of {data} have the same" in proc.stderr


def test_a_global_batch_beyond_the_training_records(tmp_path):
    """Was exit 0: TRL's steps took the 4 records there were (a batch of 4, not 8), without a word."""
    line = one_line_error(run(tmp_path, [*SFT, "data.train_limit=4", "sft.steps=1"]))
    assert line == (f"error: sft.global_batch_size: 8 is more than the 4 training records of {REPO_ROOT}/framework/"
                    f"data/samples/chat/train.jsonl; lower it (and sft.micro_batch_size), or raise data.train_limit")


KERNEL = "backend.adapter.attn_implementation"


@pytest.mark.parametrize(("kernel", "expected"), [
    ("flash", f"{KERNEL}: 'flash' does not load here: Specified `attn_implementation=\"flash\"` is not supported."),
    ("flash_attention_2", f"{KERNEL}: 'flash_attention_2' does not load here: FlashAttention2"),
    ("flex_attention", f"{KERNEL}: flex_attention has no backward pass on a CPU (torch); valid here: sdpa (the "
                       "default) or eager")])
def test_an_attention_kernel_that_cannot_run_names_the_key(kernel, expected, tmp_path):
    """An unknown kernel said `model: cannot load a causal LM ...`; flash_attention_2 without its package and
    flex_attention on a CPU (no backward) were exit 1 with transformers' ImportError / torch's NotImplementedError."""
    import importlib.util

    if kernel == "flash_attention_2" and importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash-attn is installed here")
    proc = run(tmp_path, [*SFT, "sft.steps=1", "sft.max_seq_length=1024", f"{KERNEL}={kernel}"])
    assert one_line_error(proc).startswith(f"error: {expected}")
