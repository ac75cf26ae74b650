"""Command-line guard around the Hydra app: fast option checks and one-line errors.

Errors from bad input (a CrucibleError, a Hydra composition or override error) are printed as one
line on stderr and exit with status 2; a failed run exits with status 1. CRUCIBLE_DEBUG=1 or the
override debug=true shows the traceback too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from framework.core.failure import EXIT_BAD_INPUT, EXIT_RUN_FAILED, debug_requested, fail
from framework.core.paths import CONF_DIR, REPO_ROOT
from framework.core.validation import register_resolvers

register_resolvers()  # at import: a submitit job process imports run.py (and this) before resolving the config


REQUIRED_GROUPS = ("backend", "task", "model", "hardware", "logger")  # data=none exists for tasks without data


def _group_options(group: str, dirs: tuple = (CONF_DIR,)) -> list[str] | None:
    """The options of `group` in the config dirs Hydra reads (the primary first); None where no dir has the group."""
    folders = [d / group for d in dirs if (d / group).is_dir()]
    if not folders:
        return None
    options = sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})
    return ["auto", *options] if group == "hardware" else options  # auto: registered at start (core.hardware)


class _FlagsRefused(Exception):
    """Hydra's parser refused the flags (the message) or would exit (None: --version)."""


def _hydra_flags(argv: list[str]):
    """(flags, None) as Hydra's own parser reads them (-cp/--config-path, -cd/--config-dir, `=` forms,
    abbreviations), or (None, why) where it refuses the line: its usage block and error, as one line; (None, None)
    where it would exit (--version: Hydra then prints it)."""
    # Private, kept on purpose: Hydra has no public way to read its flags before composing (@hydra.main parses them
    # with this very function), and a parser of our own would drift from Hydra's flags and abbreviations. Hydra is
    # pinned (1.3.8); tests/core/test_cli.py::test_hydras_private_flag_parser_reads_the_flags_as_hydra_main_does
    # fails if an upgrade renames it, gives it parameters, stops @hydra.main using it, or changes what we read.
    from hydra._internal.utils import get_args_parser

    def refuse(message=None, *_args):
        raise _FlagsRefused(message)

    parser = get_args_parser()
    parser.error = refuse
    parser.exit = lambda *_args, **_kwargs: refuse()
    parser._print_message = lambda *_args, **_kwargs: None
    try:
        return parser.parse_args(argv), None
    except _FlagsRefused as refused:
        message = refused.args[0]
    if message is None:
        return None, None
    if message.startswith("unrecognized arguments:"):  # Hydra's flags first: overrides after one are not read
        return None, (f"{message}; put Hydra's flags (-m, --cfg job, -cp DIR, ...) before the key=value overrides; "
                      f"python run.py --hydra-help lists the flags")
    return None, f"{message}; python run.py --hydra-help lists the flags"


def _config_dirs(flags, overrides: list) -> tuple | None:
    """The folders Hydra reads options from, as it finds them: the primary (conf/, or --config-path: absolute or
    relative to run.py's folder), --config-dir (relative to the current one) and `hydra.searchpath=[...]` entries;
    None where one is no folder we can list (pkg://...) or Hydra's parser refused the flags (`flags` None): no check
    here then."""
    if flags is None or (flags.config_path or "").startswith("pkg://"):
        return None
    primary = CONF_DIR if flags.config_path is None else Path(os.path.normpath(REPO_ROOT / flags.config_path))
    searchpath = [o.value() for o in overrides if o.key_or_group == "hydra.searchpath" and isinstance(o.value(), list)]
    # the command line's list replaces the primary config's own (Hydra's documented way to add option folders)
    searchpath = searchpath[-1] if searchpath else _own_searchpath(primary, flags.config_name)
    entries = [flags.config_dir] if flags.config_dir else []
    entries += [str(entry) for entry in searchpath or []]
    if searchpath is None or any(entry.startswith("pkg://") or "${" in entry for entry in entries):
        return None
    return (primary, *(Path(entry.removeprefix("file://")).expanduser() for entry in entries))


def _own_searchpath(primary: Path, config_name: str | None) -> list | None:
    """The primary config file's `hydra.searchpath` ([] without one; None where it cannot be read as plain
    YAML: Hydra reports that file itself)."""
    import yaml

    try:
        node = yaml.safe_load((primary / f"{(config_name or 'config').removesuffix('.yaml')}.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    hydra = node.get("hydra") if isinstance(node, dict) else None
    entries = hydra.get("searchpath") if isinstance(hydra, dict) else None
    return [str(e) for e in entries] if isinstance(entries, list) else []


def _config_dir_problem(flags, overrides: list) -> str | None:
    """A --config-path that is no folder (a file: Hydra's 3-line ValueError, exit 1), a `hydra.searchpath` file://
    entry that is none (Hydra's 2-line warning, and the run went on without it). `flags`: _hydra_flags' reading."""
    path = flags.config_path if flags is not None else None
    if path and not path.startswith("pkg://") and not (REPO_ROOT / path).is_dir():
        return (f"--config-path: {path!r} is no folder (absolute, or relative to run.py's folder {REPO_ROOT}); valid: "
                f"the folder holding config.yaml (--config-name picks another file in it)")
    for override in (o for o in overrides if o.key_or_group == "hydra.searchpath" and isinstance(o.value(), list)):
        for entry in (str(e) for e in override.value() if str(e).startswith("file://")):
            if not Path(entry.removeprefix("file://")).expanduser().is_dir():
                return f"hydra.searchpath: {entry!r} is no folder; valid: file://DIR of a folder, or pkg://PACKAGE"
    return None


def check_group_options(argv: list[str]) -> str | None:
    """The first `group=option` override naming an option that does not exist, as an error line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    flags, refused = _hydra_flags(argv)  # read once: the dirs' checks below take it
    if refused:
        return refused
    parser = OverridesParser.create()
    overrides = []
    for arg in (a for a in argv if ("=" in a or a.startswith("~")) and not a.startswith("-")):
        try:
            overrides += parser.parse_overrides([arg])
        except OverrideParseException as exc:
            detail = str(exc).splitlines()[0]
            return f"cannot parse override '{arg}': {detail} (grammar: https://hydra.cc/docs/advanced/override_grammar/basic/)"
    for override in overrides:  # an empty dir scattered the records over the current folder
        if override.key_or_group in ("hydra.run.dir", "hydra.sweep.dir") and override.value() == "":
            return (f"{override.key_or_group}: empty; valid: a folder path (`.` for the current folder, where an empty "
                    f"one put the records)")
        if override.key_or_group == "hydra.job.name" and "/" in str(override.value()):  # was blamed on the run dir
            return (f"hydra.job.name: {override.value()!r} holds a /; it names the run's log file, <run dir>/"
                    f"<name>.log; valid: a name without /")
    if problem := _empty_sweep(overrides):
        return problem
    if problem := _config_dir_problem(flags, overrides):
        return problem
    dirs = _config_dirs(flags, overrides)
    if dirs is None:
        return None
    for override in overrides:
        group = override.key_or_group
        options = _group_options(group, dirs) if not group.startswith("hydra/") else None
        if options is None:
            continue
        if override.is_delete() or (not override.is_sweep_override() and override.value() is None):
            if group in REQUIRED_GROUPS:  # every run reads them: removing one is never what was meant
                return f"{group}: a run needs one {group} option, it cannot be removed; choose one of: {', '.join(options)}"
            if not override.is_delete():  # Hydra takes no null option
                return f"{group}=null: leave {group} out (or ~{group}) for none; valid: {', '.join(options)}"
            continue
        values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
        for value in values:
            problem = _option_problem(group, value, options)
            if problem:
                return problem
    return None


def _empty_sweep(overrides: list) -> str | None:
    """`-m sim.batch=range(1,0)`: a sweep over no values ran no job and exited 0 with an empty table."""
    from hydra.errors import HydraException

    for override in (o for o in overrides if o.is_sweep_override()):
        try:
            values = list(override.sweep_iterator())
        except HydraException:  # interval(...), glob(...): only the sweeper can enumerate them
            continue
        if not values:
            return (f"{override.input_line}: sweeps over no values; valid: at least one, e.g. range(start, stop[, "
                    f"step]) with start < stop for a positive step, or a,b,c")
    return None


ONE_OPTION = (*REQUIRED_GROUPS, "data")  # a list of these merges each over the last: qwen3_8b with another's experts


def _option_problem(group: str, value, options: list[str]) -> str | None:
    """Why `group=value` names no option (a number, `true`, a list of a one-option group); None if it does."""
    if isinstance(value, dict):  # Hydra merges it into the group's node: validation checks its keys
        return None
    if isinstance(value, list) and len(value) != 1 and group in ONE_OPTION:
        given = ",".join(map(str, value))
        return (f"{group}=[{given}]: one {group} option per run (Hydra merges a list's options, each over the one "
                f"before); valid: one of {', '.join(options)}; a sweep over several: -m {group}=a,b")
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, str) or item not in options:
            shown = str(item).lower() if isinstance(item, bool) else item
            return f"unknown {group} option '{shown}'; valid: {', '.join(options)}"
    return None


HELP = """Crucible: compose an experiment from config groups and run it.

usage: python run.py [group=option ...] [key=value ...]      one run
       python run.py -m [group=a,b ...] [key=v1,v2 ...]       a sweep (one job per combination)
       python run.py recipe=NAME                             a preset from recipes/

config groups (group=option):
{groups}
backends and the tasks they run:
{backends}
launchers (with -m): hydra/launcher={launchers}

examples:
  python run.py                                              the simulator on its defaults
  python run.py -m recipe=sim_sweep                          a tp x ep sweep, summary table and plot
  python run.py task=sim model=qwen3_8b hardware=h100 sim.tp=2 sim.mode=prefill
  python run.py backend=maxtext task=grpo hardware=auto    hardware=auto (the default) picks this machine's file
  python run.py recipe=grpo_gsm8k_cpu grpo.steps=5

flags: --cfg job (print the composed config), --resolve, --info, --hydra-help (Hydra's own help),
       -m/--multirun; debug=true or CRUCIBLE_DEBUG=1 shows tracebacks.
Run records: outputs/runs/<date>/<time>_p<pid>_<backend>_<task>_<model>/ (see README.md).
"""


def print_help() -> None:
    groups = ["backend", "task", "model", "hardware", "data", "logger", "recipe"]
    lines = [f"  {g:9s} {', '.join(_group_options(g) or [])}" for g in groups]
    launchers = ["basic", "submitit_local", "submitit_slurm", *(_group_options("hydra/launcher") or [])]
    from framework.core.validation import backend_tasks
    backends = "\n".join(f"  {name:9s} task={'|'.join(tasks)}" for name, tasks in backend_tasks().items())
    print(HELP.format(groups="\n".join(lines), backends=backends, launchers=", ".join(dict.fromkeys(launchers))))


def run_guarded(app: Callable[[], object], argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:  # ours, without composing: Hydra's takes seconds as groups grow
        print_help()
        return
    debug = debug_requested(argv)
    # Hydra re-raises instead of printing a multi-line report; we print one line below.
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    problem = check_group_options(argv)
    if problem:
        sys.stderr.write(f"error: {problem}\n")
        sys.exit(EXIT_BAD_INPUT)
    from framework.core.hardware import register_auto

    register_auto()
    try:
        _print_or_run(app, argv)
    except KeyboardInterrupt:  # Ctrl-C before or after a run (during one, the runtime handles it), or between jobs
        sweep = sys.modules.get("framework.core.sweep")
        table = sweep.summarise_interrupted() if sweep is not None else None
        so_far = f"; the sweep's jobs so far: {table}" if table else ""
        sys.stderr.write(f"error: interrupted by SIGINT{so_far}\n")
        sys.exit(130)
    except Exception as exc:
        fail(run_dir_error(exc, argv) or shell_completion_error(exc, argv) or exc, debug)
    _fail_if_a_sweep_failed()


def _print_or_run(app: Callable[[], object], argv: list[str]) -> None:
    """app(); under `--cfg ... --package P` Hydra writes `package 'P' not found in config` itself and exits 1, so its
    stderr is held and that line becomes ours (exit 2); anything else it wrote passes through."""
    flags, _ = _hydra_flags(argv)
    if flags is None or not (flags.cfg and flags.package):
        app()
        return
    import contextlib
    import io

    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            app()
    except SystemExit as exc:
        if exc.code == 1 and held.getvalue().startswith(f"package '{flags.package}' not found"):
            sys.stderr.write(f"error: --package: {flags.package!r} is no key of the composed config; valid: a key or "
                             f"dotted path in it (python run.py --cfg job shows them), e.g. parallel, "
                             f"model.hf_config\n")
            sys.exit(EXIT_BAD_INPUT)
        raise
    finally:
        sys.stderr.write(held.getvalue() if not held.getvalue().startswith("package '") else "")


def run_dir_error(exc: Exception, argv: list[str]):
    """Hydra could not make or write the run or sweep dir (a file in the way, no such place, a read-only or
    unwritable folder, its run.log too: logging's ValueError wraps that OSError): a ConfigError naming the key, or
    None for any other error."""
    from framework.core.errors import ConfigError

    error = exc
    while error is not None and not (isinstance(error, OSError) and error.filename is not None):
        error = error.__cause__
    if error is None:
        return None
    filename = str(error.filename)
    for arg in argv:
        key, _, value = arg.partition("=")
        if key in ("hydra.run.dir", "hydra.sweep.dir") and value and filename.startswith(value.rstrip("/")):
            return ConfigError(f"{key}: cannot make or write the folder {value!r} ({error.strerror}: {filename}); "
                               f"valid: a path where a folder can be made and written")
    if Path(filename).absolute().is_relative_to(Path.cwd() / "outputs"):  # the default dirs, under the current folder
        flags, _ = _hydra_flags(argv)
        key = "hydra.sweep.dir" if flags is not None and flags.multirun else "hydra.run.dir"
        return ConfigError(f"{key}: cannot make the default folder under outputs/ ({error.strerror}: {filename}); "
                           f"valid: run from a folder you can write, or give {key}=DIR")
    return None


def shell_completion_error(exc: Exception, argv: list[str]):
    """Hydra's --shell-completion without one subcommand, or with a shell it has no plugin for: a ValueError of
    several lines (or query's KeyError outside a shell), exit 1; a ConfigError naming the flag, or None."""
    from framework.core.errors import ConfigError

    flags, _ = _hydra_flags(argv)
    if flags is None or not flags.shell_completion or not isinstance(exc, (ValueError, KeyError)):
        return None
    said = " ".join(str(exc).replace(":", "").split()) if isinstance(exc, ValueError) else f"{exc} is not set"
    return ConfigError(f"--shell-completion: {said}; valid: install=SHELL or uninstall=SHELL with SHELL one of bash, "
                       f"fish, zsh (query=SHELL is for the shell itself: it reads COMP_LINE)")


def _fail_if_a_sweep_failed() -> None:
    sweep = sys.modules.get("framework.core.sweep")
    if sweep is not None and sweep.FAILED_SWEEPS:
        sys.stderr.write(f"error: {sweep.FAILED_SWEEPS[-1]}\n")
        sys.exit(EXIT_RUN_FAILED)
