"""Errors a user can act on. Each message is one line naming the key or file and what is valid.

run.py prints these as a single line on stderr and exits non-zero; set CRUCIBLE_DEBUG=1 (or pass
debug=true) to see the traceback as well.
"""


class CrucibleError(Exception):
    """An error caused by the user's input, reported as one line without a traceback."""


class ConfigError(CrucibleError):
    """A config key is missing, unknown, of the wrong type, or names an invalid option."""


class DataError(CrucibleError):
    """A data file or model path is missing or malformed."""


class CheckpointError(CrucibleError):
    """A checkpoint is missing, incomplete or does not match the run."""


class BackendError(CrucibleError):
    """A backend cannot run here: missing library, unsupported version or device."""



class RunFailure(CrucibleError):
    """The run itself failed in a way one line explains (a non-finite loss, a full disk); exit status 1."""
