"""Run many `python run.py ARGS` cases from one interpreter: the imports happen once, then each case runs in
a forked child exactly as the command line would (own Hydra state, own exit status, own stdout/stderr).

    python tests/cli_batch.py < cases.json > results.json     # cases: [[arg, ...], ...]

Used by tests/core/test_reliability.py to keep a table of ~150 bad inputs fast.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_case(args: list[str]) -> dict:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: run.py's main with these arguments
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = ["run.py", *args]
        code = 0
        try:  # as `python run.py`: Hydra finds conf/ next to a __main__ script
            runpy.run_path(str(REPO_ROOT / "run.py"), run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - an escaped exception is what the table looks for
            traceback.print_exc()
            code = 99
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    texts = []
    for handle in (out, err):
        handle.seek(0)
        texts.append(handle.read().decode("utf-8", "replace"))
        handle.close()
    return {"args": args, "rc": os.waitstatus_to_exitcode(status), "stdout": texts[0], "stderr": texts[1]}


def main() -> None:
    cases = json.load(sys.stdin)
    os.chdir(REPO_ROOT)
    sys.path.insert(0, str(REPO_ROOT))
    os.environ.pop("HYDRA_FULL_ERROR", None)
    import framework.cli  # noqa: F401,E402 - imported once here rather than in every child
    import framework.core.runtime  # noqa: F401,E402

    results = [run_case(args) for args in cases]
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    main()
