"""The core checkpoint contract: atomic publish, manifest checksums, fallback past a damaged checkpoint,
fingerprint refusal, keep-N pruning."""

import json

import pytest

from framework.core.checkpoint import MANIFEST, CheckpointPolicy, CheckpointStore
from framework.core.errors import CheckpointError
from framework.core.resume import OneSidedAllowed


def _store(tmp_path, keep=3, fingerprint=None, resume=True):
    return CheckpointStore(tmp_path, CheckpointPolicy(every=1, keep=keep, resume=resume), fingerprint or {"m": 1})


def _save(store, step, payload=b"weights"):
    return store.save(step, lambda d: (d / "w.bin").write_bytes(payload + bytes([step])), {"position": step})


def test_save_publishes_with_manifest_and_latest_restores_state(tmp_path):
    store = _store(tmp_path)
    _save(store, 1)
    path = _save(store, 2)
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["files"]["w.bin"]["bytes"] == len(b"weights") + 1
    latest = store.latest()
    assert (latest.step, latest.state) == (2, {"position": 2})
    assert not [p for p in store.root.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_flipped_byte_falls_back_to_the_previous_checkpoint(tmp_path, caplog):
    store = _store(tmp_path)
    _save(store, 1)
    path = _save(store, 2)
    data = bytearray((path / "w.bin").read_bytes())
    data[0] ^= 0x01
    (path / "w.bin").write_bytes(bytes(data))
    assert store.latest().step == 1
    assert "checksum mismatch" in caplog.text


@pytest.mark.parametrize("damage", [lambda m: [1, 2], lambda m: m | {"files": {"w.bin": "ab12"}},
                                    lambda m: m | {"files": {"w.bin": {"sha256": "ab12"}}},
                                    lambda m: m | {"state": None}, lambda m: m | {"fingerprint": ["x"]}],
                         ids=["a list", "files as strings", "no bytes", "state null", "fingerprint a list"])
def test_a_manifest_of_another_shape_falls_back_to_the_previous_checkpoint(tmp_path, caplog, damage):
    """One cut off or written by another version of the store: was AttributeError / TypeError (exit 1) on resume, or
    a 'saved by a different setup' line printing the whole config."""
    store = _store(tmp_path)
    _save(store, 1)
    manifest = _save(store, 2) / MANIFEST
    manifest.write_text(json.dumps(damage(json.loads(manifest.read_text()))))
    assert store.latest().step == 1
    assert f"{manifest}: not a checkpoint manifest of step 2" in caplog.text



def test_every_checkpoint_damaged_is_refused_not_a_fresh_start(tmp_path):
    """A fresh start there appended a second step 1.. to the run's metrics (was: None, training from step 0)."""
    store = _store(tmp_path)
    for step in (1, 2):
        (_save(store, step) / "w.bin").write_bytes(b"flipped")
    with pytest.raises(CheckpointError, match="every checkpoint is damaged .steps 1, 2.*new run dir"):
        store.latest()

def test_a_failed_write_leaves_no_checkpoint(tmp_path):
    store = _store(tmp_path)

    def broken(folder):
        (folder / "half.bin").write_bytes(b"x")
        raise OSError("No space left on device")

    with pytest.raises(OSError):
        store.save(1, broken)
    assert store.steps() == [] and store.latest() is None


def test_a_changed_setup_is_refused_naming_the_key(tmp_path):
    _save(_store(tmp_path, fingerprint={"model": {"layers": 2}}), 1)
    with pytest.raises(CheckpointError, match=r"model.layers \(saved 2, now 4\)"):
        _store(tmp_path, fingerprint={"model": {"layers": 4}}).latest()


def test_keys_the_resume_check_accepted_may_be_on_one_side_only_and_nothing_else(tmp_path):
    _save(_store(tmp_path, fingerprint={"model": {"layers": 2, "old": 1}}), 1)
    policy = CheckpointPolicy(every=1, keep=3, resume=True)
    accepted = frozenset({"model.old", "model.new"})
    assert CheckpointStore(tmp_path, policy, {"model": {"layers": 2, "new": 0}}, absent_ok=accepted).latest().step == 1
    with pytest.raises(CheckpointError, match=r"model.new \(not in the checkpoint, now 0\)"):
        CheckpointStore(tmp_path, policy, {"model": {"layers": 2, "old": 1, "new": 0}}).latest()
    with pytest.raises(CheckpointError, match=r"model.old \(saved 1, now 2\)"):  # on both sides: compared
        CheckpointStore(tmp_path, policy, {"model": {"layers": 2, "old": 2}}, absent_ok=accepted).latest()


def test_a_fallback_past_a_damaged_checkpoint_accepts_keys_a_release_added_unless_set_on_the_command_line(tmp_path):
    _save(_store(tmp_path, fingerprint={"model": {"layers": 2}}), 1)  # before the release
    newest = _save(_store(tmp_path, fingerprint={"model": {"layers": 2, "new": 0}}), 2)  # after it
    (newest / "w.bin").write_bytes(b"damaged")
    policy, now = CheckpointPolicy(every=1, keep=3, resume=True), {"model": {"layers": 2, "new": 0}}
    assert CheckpointStore(tmp_path, policy, now, absent_ok=OneSidedAllowed()).latest().step == 1
    with pytest.raises(CheckpointError, match=r"model.new \(not in the checkpoint, now 0\)"):
        CheckpointStore(tmp_path, policy, now, absent_ok=OneSidedAllowed(("model.new=0",))).latest()


def test_keep_prunes_old_checkpoints_and_policy_says_when_to_save(tmp_path):
    store = _store(tmp_path, keep=2)
    for step in (1, 2, 3):
        _save(store, step)
    assert store.steps() == [2, 3]
    policy = CheckpointPolicy(every=2, keep=1, resume=True)
    assert [s for s in range(1, 6) if policy.due(s, last_step=5)] == [2, 4, 5]
    assert not CheckpointPolicy(every=0, keep=1, resume=True).due(5, 5)
    assert _store(tmp_path, resume=False).resume_point() is None
