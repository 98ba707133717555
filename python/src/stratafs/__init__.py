"""stratafs: the Python SDK of strata.

strata gives every agent, test run or experiment its own complete, writable
copy of a project in milliseconds, without root. This package drives the
``strata`` binary's ``--json`` interface with the standard library only::

    import stratafs
    s = stratafs.Store(home)                      # or Store() for the default home
    with s.workspace("w1", from_="main") as ws:   # removed on exit
        r = ws.exec(["pytest", "-q"], timeout=600)  # r.exit_code, r.stdout, r.stderr
        patch = ws.diff()
        ws.commit("msg"); ws.reset()
    for res in s.batch(jobs, parallel=4): ...

Every exception derives from :class:`StrataError`.
"""

from .errors import (
    BinaryNotFoundError,
    ConflictError,
    CorruptError,
    ExistsError,
    IncompatibleError,
    InterruptedError_,
    InvalidNameError,
    NoSpaceError,
    NoStoreError,
    NotFoundError,
    PermissionDeniedError,
    ReadOnlyError,
    StrataError,
    UnsupportedError,
    UsageError,
)
from .store import SUPPORTED_PROTOCOL, SUPPORTED_SCHEMA, Job, JobResult, Result, RunResult, Store, Workspace

__version__ = "0.1.0"

__all__ = [
    "Store",
    "Workspace",
    "Result",
    "RunResult",
    "Job",
    "JobResult",
    "SUPPORTED_SCHEMA",
    "SUPPORTED_PROTOCOL",
    "StrataError",
    "UsageError",
    "ConflictError",
    "NotFoundError",
    "ExistsError",
    "InvalidNameError",
    "NoStoreError",
    "ReadOnlyError",
    "NoSpaceError",
    "CorruptError",
    "UnsupportedError",
    "PermissionDeniedError",
    "InterruptedError_",
    "IncompatibleError",
    "BinaryNotFoundError",
]
