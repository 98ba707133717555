"""Typed errors of the strata CLI.

The CLI reports a failure by its exit code (1 error, 2 usage, 3 conflict,
125 strata failed around an exec'd command) and, with ``--json``, a
``{"error": ..., "kind": ...}`` line on stderr. :func:`from_cli` maps both to
one of the classes below; every one derives from :class:`StrataError`.
"""

from typing import Dict, Optional, Type

__all__ = [
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
    "from_cli",
]


class StrataError(Exception):
    """A strata command failed.

    Attributes:
        message: what strata said.
        kind: the CLI's error category (``"not_found"``, ``"conflict"``, ...).
        exit_code: the CLI's exit code, when a command ran.
        argv: the command line that failed.
    """

    kind = "error"

    def __init__(self, message: str, *, kind: Optional[str] = None, exit_code: Optional[int] = None,
                 argv: Optional[list] = None, stderr: str = "") -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        self.exit_code = exit_code
        self.argv = argv or []
        self.stderr = stderr


class UsageError(StrataError):
    """strata was called wrongly (exit 2)."""

    kind = "usage"


class ConflictError(StrataError):
    """A compare-and-swap lost, a merge conflicted, or uncommitted changes are in the way (exit 3)."""

    kind = "conflict"


class NotFoundError(StrataError):
    """A workspace, branch, commit or path does not exist."""

    kind = "not_found"


class ExistsError(StrataError):
    """A workspace or branch of that name already exists."""

    kind = "exists"


class InvalidNameError(UsageError):
    """A workspace or branch name is not valid (exit 2)."""

    kind = "invalid_name"


class NoStoreError(StrataError):
    """The home directory holds no store: import something, or ``strata init``."""

    kind = "no_store"


class ReadOnlyError(StrataError):
    """The store cannot be written here."""

    kind = "read_only"


class NoSpaceError(StrataError):
    """The disk holding the store is full; the store is unchanged."""

    kind = "no_space"


class CorruptError(StrataError):
    """The store failed a hash or consistency check (see ``strata fsck``)."""

    kind = "corrupt"


class UnsupportedError(StrataError):
    """The kernel or user lacks a feature (see ``strata doctor``)."""

    kind = "unsupported"


class PermissionDeniedError(StrataError):
    """The operating system refused access."""

    kind = "permission"


class InterruptedError_(StrataError):
    """The operation was interrupted; nothing was changed by it."""

    kind = "interrupted"


class IncompatibleError(StrataError):
    """The strata binary is too old or too new for this SDK."""

    kind = "incompatible"


class BinaryNotFoundError(StrataError):
    """No strata binary was found (pass ``binary=`` or set ``STRATA_BIN``)."""

    kind = "binary_not_found"


_BY_KIND: Dict[str, Type[StrataError]] = {
    c.kind: c
    for c in (UsageError, ConflictError, NotFoundError, ExistsError, InvalidNameError, NoStoreError,
              ReadOnlyError, NoSpaceError, CorruptError, UnsupportedError, PermissionDeniedError,
              InterruptedError_)
}

_BY_CODE: Dict[int, Type[StrataError]] = {2: UsageError, 3: ConflictError}


def from_cli(exit_code: int, message: str, kind: Optional[str], argv: list, stderr: str = "") -> StrataError:
    """The typed error for a failed CLI call: by kind when the CLI named one, else by exit code."""
    cls = _BY_KIND.get(kind or "") or _BY_CODE.get(exit_code, StrataError)
    return cls(message, kind=kind or cls.kind, exit_code=exit_code, argv=argv, stderr=stderr)
