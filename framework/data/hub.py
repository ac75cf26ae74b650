"""A data set's split from the Hugging Face hub (`datasets.load_dataset`): one call for every format, one line
when it fails.

Without a network huggingface_hub retries a connection error five times with backoff (about 25 s, two warnings
each), so the hub is asked once first, without retries, and a connection error there is the one line. Under
HF_HUB_OFFLINE=1 `datasets` reads its cache at once: no question is asked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from framework.core.errors import DataError

PROBE_TIMEOUT_S = 5.0  # a reachable hub answers a HEAD well within it
OFFLINE_WAY_OUT = "or HF_HUB_OFFLINE=1 to read it from the HF cache (a data set loaded before)"


def load_hub_split(dataset_id: str, split: str, way_out: str, config: str | None = None,
                   cache_dir: str | None = None) -> Any:
    """The split as a `datasets.Dataset`; a DataError naming data.path and `way_out` (what else to use)."""
    if not Path(dataset_id).expanduser().exists():  # a folder laid out as a hub repository is read locally
        check_hub_reachable(dataset_id, way_out)
    quiet = {name: logging.getLogger(name) for name in ("huggingface_hub.utils._http", "datasets")}
    levels = {name: log.level for name, log in quiet.items()}
    for log in quiet.values():  # each retry (and datasets' import notes) would log before our one line
        log.setLevel(logging.ERROR)
    try:
        import datasets

        return datasets.load_dataset(dataset_id, config, split=split, cache_dir=cache_dir)
    except Exception as error:  # datasets raises many types (connection, not found, offline): one line
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise DataError(f"data.path: {dataset_id} (split {split}): could not load from the hub "
                        f"({type(error).__name__}: {detail}); {way_out}") from None
    finally:
        for name, log in quiet.items():
            log.setLevel(levels[name])


def check_hub_reachable(dataset_id: str, way_out: str) -> None:
    """One HEAD request to the hub's endpoint (its session: proxies, HF_ENDPOINT); skipped offline, where
    `datasets` asks nothing."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    if constants.HF_HUB_OFFLINE:
        return
    try:
        get_session().head(constants.ENDPOINT, timeout=PROBE_TIMEOUT_S)
    except Exception as error:  # the session's transport errors (no DNS, refused, timed out); an HTTP status is none
        raise DataError(f"data.path: {dataset_id}: cannot reach the hub at {constants.ENDPOINT} "
                        f"({type(error).__name__}); {way_out}, {OFFLINE_WAY_OUT}") from None
