"""Bad input to backend=mlx: one line on stderr naming the key or file and what is valid, exit 2."""

from __future__ import annotations

import json
import platform
import shutil

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from tests.conftest import run_cli  # noqa: E402

DPO = ["recipe=dpo_mlx_cpu", "dpo.steps=1", "progress=false"]


def one_line_error(args: list[str], tmp_path, cache) -> str:
    proc = run_cli([*args, f"hydra.run.dir={tmp_path / 'run'}"], env={"CRUCIBLE_CACHE": str(cache)})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    return lines[0]


def model_copy(tiny_dir, out, keep) -> str:
    out.mkdir()
    for file in tiny_dir.iterdir():
        if keep(file.name):
            shutil.copy2(file, out / file.name)
    return f"model.path={out}"


def test_preference_file_without_rejected(tmp_path, mlx_cache):
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"prompt": "2+2?", "chosen": "4"}) + "\n")
    line = one_line_error([*DPO, "data.source=local", f"data.path={data}"], tmp_path, mlx_cache)
    assert f"{data}:1" in line and "rejected" in line


def test_model_dir_without_tokenizer(tmp_path, mlx_cache, tiny_dir):
    path = model_copy(tiny_dir, tmp_path / "model", lambda name: name in ("config.json", "model.safetensors"))
    line = one_line_error([*DPO, path], tmp_path, mlx_cache)
    assert "model.path" in line and "no tokenizer" in line


def test_tokenizer_without_chat_template(tmp_path, mlx_cache, tiny_dir):
    path = model_copy(tiny_dir, tmp_path / "model", lambda name: name != "chat_template.jinja")
    config = tmp_path / "model" / "tokenizer_config.json"
    config.write_text(json.dumps({k: v for k, v in json.loads(config.read_text()).items() if k != "chat_template"}))
    line = one_line_error([*DPO, path], tmp_path, mlx_cache)
    assert "chat template" in line


def test_lora_target_the_model_lacks(tmp_path, mlx_cache):
    line = one_line_error([*DPO, "dpo.lora.target_modules=[attn_qkv]"], tmp_path, mlx_cache)
    assert "dpo.lora.target_modules" in line and "q_proj" in line and "all-linear" in line


def test_unknown_loss_type(tmp_path, mlx_cache):
    line = one_line_error([*DPO, "dpo.loss_type=kto"], tmp_path, mlx_cache)
    assert "dpo.loss_type" in line and "sigmoid" in line and "robust" in line


def test_reference_model_directory_missing(tmp_path, mlx_cache):
    line = one_line_error([*DPO, "dpo.reference=model", f"dpo.reference_model={tmp_path / 'nowhere'}"], tmp_path,
                          mlx_cache)
    assert "dpo.reference_model" in line and "does not exist" in line


@pytest.mark.skipif(platform.system() == "Darwin", reason="Apple silicon runs hardware=m2_ultra")
def test_m2_ultra_on_linux_says_what_it_found(tmp_path, mlx_cache):
    line = one_line_error(["recipe=dpo_mlx", "progress=false"], tmp_path, mlx_cache)
    assert "hardware=m2_ultra" in line and "Linux" in line and "hardware=cpu" in line


def test_a_max_seq_length_every_prompt_fills(tmp_path, mlx_cache):
    """Was exit 0 after a step of loss 0 and grad norm 0: no completion token left to learn."""
    line = one_line_error(["recipe=sft_mlx_cpu", "sft.steps=1", "progress=false", "sft.max_seq_length=8"],
                          tmp_path, mlx_cache)
    assert line.startswith("error: sft.max_seq_length: 8 tokens leave no training record a completion token")


SAME = {"prompt": "What is 2+2?", "chosen": "The answer is four, because two plus two makes four in every base above "
        "four.", "rejected": "The answer is four, because I said so and that is all."}
DIFFERENT = {"prompt": "What is 3+3?", "chosen": "Six.", "rejected": "Seven, I think."}


def test_dpo_pairs_that_truncate_to_the_same_tokens(tmp_path, mlx_cache):
    """Such a pair has a zero loss gradient: all of them is one line before training, some a warning with the count
    (was: exit 0 after a step of loss 0.6931, grad norm 0, without a word)."""
    data = tmp_path / "pairs.jsonl"
    short = [*DPO, "data.source=local", f"data.path={data}", "dpo.max_completion_length=6", "dpo.eval.every=0"]
    data.write_text(f"{json.dumps(SAME)}\n" * 8)
    line = one_line_error(short, tmp_path, mlx_cache)
    assert line == (f"error: dpo.max_completion_length: 8 of 8 training pairs of {data} have the same chosen and "
                    f"rejected tokens once cut to 6 tokens: the run would train on nothing; raise "
                    f"dpo.max_completion_length")
    data.write_text(f"{json.dumps(SAME)}\n" * 6 + f"{json.dumps(DIFFERENT)}\n" * 2)
    proc = run_cli([*short, f"hydra.run.dir={tmp_path / 'some'}"], env={"CRUCIBLE_CACHE": str(mlx_cache)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"dpo.max_completion_length: 6 of 8 training pairs of {data} have the same" in proc.stderr


def test_a_global_batch_beyond_the_training_records(tmp_path, mlx_cache):
    """Was exit 0: every step repeated the 3 records to fill 8 rows, without a word."""
    data = tmp_path / "chat.jsonl"
    record = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    data.write_text(f"{json.dumps(record)}\n" * 3)
    line = one_line_error(["recipe=sft_mlx_cpu", "sft.steps=1", "progress=false", "data.source=local",
                           f"data.path={data}"], tmp_path, mlx_cache)
    assert line == (f"error: sft.global_batch_size: 8 is more than the 3 training records of {data}; lower it (and "
                    f"sft.micro_batch_size), or add records")


@pytest.mark.parametrize(("layout", "expected"), [
    ("parallel.dp=2", "parallel: 1 devices do not split into the fixed axes' product 2"),
    ("parallel.fsdp=2", "parallel: dp=1 x fsdp=2 x tp=1 x pp=1 x cp=1 uses 2 devices, but 1 are there")])
def test_a_layout_of_more_than_one_device_is_refused(layout, expected, tmp_path, mlx_cache):
    """backend=mlx trains on one device; any parallel layout was ignored (exit 0)."""
    line = one_line_error([*DPO, layout], tmp_path, mlx_cache)
    assert line.startswith(f"error: {expected}") and line.endswith("; backend=mlx trains on one device (each axis 1, "
                                                                    "or -1)")

