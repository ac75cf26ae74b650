"""A model's hub id as a local directory: the Hugging Face cache, else a download; offline, one line.

Every backend loads models through `resolve_model_dir` (framework/models/tiny.py), which calls this
when `model.path` is null and `model.random_init` false, so none of them meets the hub unprepared.
"""

from __future__ import annotations

from framework.core.errors import ConfigError


# A model's files without its weights: config, generation config, tokenizer (framework/models/source.py)
METADATA_PATTERNS = ["*.json", "*.txt", "*.jinja", "*.model", "*.tiktoken"]


def hub_snapshot(hub_id: str) -> str:
    """The local snapshot directory of `hub_id` (HF_HOME / HF_HUB_CACHE honoured); downloads it when
    it is not cached and the hub is reachable. Offline and uncached: ConfigError naming the ways out."""
    return _snapshot(hub_id, None)


def hub_metadata(hub_id: str) -> str:
    """hub_snapshot of the files a run needs before the weights (METADATA_PATTERNS), with the same errors."""
    return _snapshot(hub_id, METADATA_PATTERNS)


def _snapshot(hub_id: str, allow_patterns: list[str] | None) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return snapshot_download(hub_id, local_files_only=True, allow_patterns=allow_patterns)
    except LocalEntryNotFoundError:
        pass  # not cached yet
    try:
        return snapshot_download(hub_id, allow_patterns=allow_patterns)
    except (LocalEntryNotFoundError, RepositoryNotFoundError, HfHubHTTPError, OSError) as error:
        raise ConfigError(f"model.hub_id={hub_id}: not in the local Hugging Face cache and the hub cannot be "
                          f"reached ({type(error).__name__}); use model.path=DIR (a local HF model directory) or "
                          f"model.random_init=true (random weights, offline), and data=gsm8k_sample for shipped "
                          f"data") from None
