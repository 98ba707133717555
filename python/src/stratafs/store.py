"""Store and Workspace: the strata CLI driven through ``--json``."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from .errors import BinaryNotFoundError, IncompatibleError, StrataError, from_cli

__all__ = ["Store", "Workspace", "Result", "RunResult", "Job", "JobResult", "SUPPORTED_SCHEMA", "SUPPORTED_PROTOCOL"]

#: Store schema versions this SDK knows (``strata version --json``'s
#: ``schema``). A store's schema is checked by the binary itself; the SDK
#: refuses a binary whose schema it has not been tested with (3: large
#: directories as tree indexes; 4: as run indexes — nothing the SDK reads).
SUPPORTED_SCHEMA = range(1, 5)
#: Keeper protocol versions this SDK has been tested with.
SUPPORTED_PROTOCOL = range(5, 8)

#: Exit code of a command strata ended at its timeout (as ``timeout(1)``).
EXIT_TIMEOUT = 124
#: Exit code when strata itself failed around an exec'd command.
EXIT_STRATA = 125
#: Exit code of strata batch when every job ran and at least one failed (docs/cli.md).
EXIT_JOBS_FAILED = 4

Command = Union[str, Sequence[str]]


def _argv(command: Command) -> List[str]:
    if isinstance(command, str):
        if not command.strip():
            raise ValueError("command is empty")
        return ["/bin/sh", "-c", command]
    argv = [str(a) for a in command]
    if not argv:
        raise ValueError("command is an empty list: give [program, args...]")
    return argv


def _env_flags(env: Optional[Mapping[str, str]]) -> List[str]:
    out: List[str] = []
    for k, v in (env or {}).items():
        if not k or "=" in k:
            raise ValueError("bad environment variable name %r" % k)
        out += ["--env", "%s=%s" % (k, v)]
    return out


@dataclass
class Result:
    """How a command in a workspace ended.

    ``durations`` holds seconds: ``total`` (wall time of the call), and for
    :meth:`Store.run` each phase strata reports (``fork``, ``patch``, ``run``,
    ``diff``, ``commit``, ``discard``).
    """

    exit_code: int
    stdout: str
    stderr: str
    durations: Dict[str, float] = field(default_factory=dict)
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """The command exited with 0."""
        return self.exit_code == 0


@dataclass
class RunResult(Result):
    """The result of :meth:`Store.run`: a :class:`Result` plus what strata reports of the run."""

    id: str = ""
    commit: str = ""
    branch: str = ""
    workspace: str = ""
    diff: Dict[str, Any] = field(default_factory=dict)
    raw: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Job:
    """One job of :meth:`Store.batch` (the fields of a ``strata batch`` line).

    ``command`` is an argv list or a shell string; ``patch`` a patch's text.
    ``from_`` an image commit makes the job image-rooted; ``root`` (an image)
    with ``at`` (a path) runs ``from_`` as a project at ``at`` over that
    image; ``scope`` ("project" or "all") is what an image-rooted job's diff
    and commit cover.
    """

    command: Command
    id: str = ""
    from_: str = ""
    patch: str = ""
    timeout: Optional[float] = None
    env: Optional[Mapping[str, str]] = None
    cwd: str = ""
    commit: str = ""
    keep: bool = False
    root: str = ""
    at: str = ""
    scope: str = ""
    #: "overlay", "reflink", "copy" or "auto"; "" takes the batch's (the store's default).
    backend: str = ""

    def to_json(self) -> Dict[str, Any]:
        j: Dict[str, Any] = {"cmd": list(self.command) if not isinstance(self.command, str) else self.command}
        if self.id:
            j["id"] = self.id
        if self.from_:
            j["from"] = self.from_
        if self.patch:
            j["patch_text"] = self.patch
        if self.timeout is not None:
            j["timeout"] = self.timeout
        if self.env:
            j["env"] = dict(self.env)
        if self.cwd:
            j["cwd"] = self.cwd
        if self.commit:
            j["commit"] = self.commit
        if self.keep:
            j["keep"] = True
        for k in ("root", "at", "scope"):
            if getattr(self, k):
                j[k] = getattr(self, k)
        if self.backend:
            j["backend"] = self.backend
        return j


@dataclass
class JobResult:
    """One finished job of :meth:`Store.batch`, as its result line reports it.

    ``stdout``/``stderr`` are the last 4 KiB of the job's output. ``error`` is
    set (and ``exit_code`` is 125) when strata could not run the job.
    """

    id: str
    index: int
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    durations: Dict[str, float]
    error: str = ""
    error_kind: str = ""
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.error


def _strata_error_line(stderr: str) -> bool:
    lines = stderr.strip().splitlines()
    if not lines:
        return False
    try:
        obj = json.loads(lines[-1])
    except ValueError:
        return False
    return isinstance(obj, dict) and "error" in obj and "kind" in obj


def _durations(ns: Mapping[str, int]) -> Dict[str, float]:
    return {k: v / 1e9 for k, v in (ns or {}).items()}


def _find_binary(binary: Optional[str]) -> str:
    b = binary or os.environ.get("STRATA_BIN") or shutil.which("strata")
    if not b:
        raise BinaryNotFoundError("no strata binary: install strata on PATH, set STRATA_BIN, or pass binary=")
    if os.sep not in b:
        found = shutil.which(b)
        if not found:
            raise BinaryNotFoundError("strata binary %r is not on PATH" % b)
        b = found
    if not os.access(b, os.X_OK):
        raise BinaryNotFoundError("strata binary %s is not executable" % b)
    return b


class Store:
    """A strata store: ``Store(home)``, or ``Store()`` for the CLI's default
    home ($STRATA_HOME, $XDG_DATA_HOME/strata, ~/.local/share/strata).

    Every method runs the strata binary (``binary``, else $STRATA_BIN, else
    ``strata`` on PATH) with ``--json`` and raises a
    :class:`~stratafs.StrataError` subclass when it fails. The binary's
    version is checked once, on first use.
    """

    def __init__(self, home: Optional[Union[str, "os.PathLike[str]"]] = None, *, binary: Optional[str] = None,
                 env: Optional[Mapping[str, str]] = None) -> None:
        self.home = os.path.abspath(os.fspath(home)) if home is not None else None
        self.binary = _find_binary(binary)
        self._env = dict(env) if env is not None else None
        self._version: Optional[Dict[str, Any]] = None

    # --- plumbing -----------------------------------------------------------

    def _base(self) -> List[str]:
        b = [self.binary, "--json", "--quiet"]
        if self.home is not None:
            b += ["--home", self.home]
        return b

    def _popen_env(self) -> Optional[Dict[str, str]]:
        if self._env is None:
            return None
        e = dict(os.environ)
        e.update(self._env)
        return e

    @staticmethod
    def _error(argv: List[str], code: int, stderr: str) -> StrataError:
        message, kind = "", None
        for line in reversed(stderr.strip().splitlines()):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "error" in obj:
                message, kind = str(obj["error"]), obj.get("kind")
                break
        if not message:
            message = stderr.strip() or "strata exited with %d" % code
        return from_cli(code, message, kind, argv, stderr)

    def _raw(self, *args: str, input: Optional[bytes] = None) -> "tuple[list, int, str, str]":
        self.version()
        argv = self._base() + list(args)
        p = subprocess.run(argv, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._popen_env())
        return argv, p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def _call(self, *args: str, input: Optional[bytes] = None) -> str:
        argv, code, out, err = self._raw(*args, input=input)
        if code != 0:
            raise self._error(argv, code, err)
        return out

    def _json(self, *args: str, **kw: Any) -> Any:
        out = self._call(*args, **kw)
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        if len(lines) == 1:
            return lines[0]
        return lines

    def version(self) -> Dict[str, Any]:
        """``strata version --json``: version, commit, go, schema, protocol.

        Raises :class:`~stratafs.IncompatibleError` when the binary predates
        ``strata version`` or speaks a schema or protocol this SDK does not know.
        """
        if self._version is None:
            argv = [self.binary, "version", "--json"]
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._popen_env())
            try:
                v = json.loads(p.stdout.decode())
            except ValueError:
                v = None
            if p.returncode != 0 or not isinstance(v, dict) or "schema" not in v or "protocol" not in v:
                raise IncompatibleError("%s does not report its version (`strata version --json`); upgrade strata" % self.binary,
                                        argv=argv, exit_code=p.returncode, stderr=p.stderr.decode("utf-8", "replace"))
            if v["schema"] not in SUPPORTED_SCHEMA or v["protocol"] not in SUPPORTED_PROTOCOL:
                raise IncompatibleError("%s speaks store schema %s and keeper protocol %s; this stratafs knows schemas %s and protocols %s: "
                                        "use a matching stratafs" % (self.binary, v["schema"], v["protocol"],
                                                                     list(SUPPORTED_SCHEMA), list(SUPPORTED_PROTOCOL)), argv=argv)
            self._version = v
        return self._version

    # --- store ---------------------------------------------------------------

    def init(self) -> None:
        """Create the store if it does not exist (idempotent)."""
        self._call("init")

    def import_dir(self, path: Union[str, "os.PathLike[str]"], *, branch: str = "main", message: str = "",
                   exclude: Iterable[str] = ()) -> Dict[str, Any]:
        """Snapshot everything under ``path`` as a commit on ``branch`` (creating the store if needed).

        Returns strata's import report (``commit``, ``branch``, ``stats``, ...).
        """
        args = ["import", os.fspath(path), "--branch", branch]
        if message:
            args += ["--message", message]
        for g in exclude:
            args += ["--exclude", g]
        return self._json(*args)

    def import_image(self, src: str, *, branch: str = "main", platform: str = "",
                     tls_verify: bool = True) -> Dict[str, Any]:
        """Import the container image ``src`` (``docker://HOST/REPO:TAG`` or a bare reference,
        ``oci:DIR[:TAG]``, ``docker-archive:FILE``) as ``branch``; layers the store has are
        not read again. A workspace, run or batch job from it is image-rooted.
        Returns strata's import report (``commit``, ``layers``, ``config``, ...)."""
        args = ["import", "--image", src, "--branch", branch]
        if platform:
            args += ["--platform", platform]
        if not tls_verify:
            args.append("--tls-verify=false")
        return self._json(*args)

    def import_git(self, repo: Union[str, "os.PathLike[str]"], rev: str = "", *, branch: str = "main",
                   message: str = "", with_ignored: Iterable[str] = ()) -> Dict[str, Any]:
        """Snapshot a git commit (``rev``, default HEAD) of ``repo``: tracked files, a working
        ``.git``, and ignored dependency directories (``with_ignored``: ``auto`` by default)."""
        spec = os.fspath(repo) + ("@" + rev if rev else "")
        args = ["import", "--git", spec, "--branch", branch]
        if message:
            args += ["--message", message]
        for g in with_ignored:
            args += ["--with-ignored", g]
        return self._json(*args)

    def branches(self) -> List[Dict[str, Any]]:
        """The store's branches."""
        out = self._json("branch", "list")
        return out if isinstance(out, list) else [out]

    def log(self, ref: str = "main", n: int = 0) -> List[Dict[str, Any]]:
        """The first-parent history of ``ref``, newest first."""
        args = ["log", ref]
        if n > 0:
            args += ["-n", str(n)]
        out = self._json(*args)
        return out if isinstance(out, list) else [out]

    # --- workspaces ------------------------------------------------------------

    def workspace(self, name: str, from_: str = "main", *, tmpfs: bool = False, branch: str = "",
                  keep: bool = False, root: str = "", at: str = "", scope: str = "",
                  env: Optional[Mapping[str, str]] = None, cwd: str = "",
                  backend: str = "") -> "Workspace":
        """Create workspace ``name`` from ``from_`` and return it.

        Used as a context manager it is removed on exit, uncommitted changes
        and all, unless ``keep`` is set. When ``from_`` is an image commit
        (``strata import --image``, ``strata pull``) the workspace is
        image-rooted: the image is its ``/``, its commands get the image's
        environment (``env`` and ``cwd`` override it), and ``scope``
        ("project", default, or "all") is what its diff and commits cover.
        ``root`` (an image) with ``at`` puts ``from_`` as a project at ``at``
        over that image instead. ``backend`` is how its writable tree
        is made: ``"overlay"``, ``"reflink"`` (a clone, on XFS or Btrfs),
        ``"copy"`` or ``"auto"``; ``""`` takes the store's default (auto).
        An image-rooted workspace is always overlay.
        ``Workspace.info["backend"]`` says which it got.
        """
        args = ["ws", "create", name]
        if branch:
            args += ["--branch", branch]
        else:
            args += ["--from", from_]
        if tmpfs:
            args.append("--tmpfs")
        if root:
            args += ["--root", root]
        if at:
            args += ["--at", at]
        if scope:
            args += ["--scope", scope]
        if cwd:
            args += ["--cwd", cwd]
        args += _env_flags(env)
        if backend:
            args += ["--backend", backend]
        info = self._json(*args)
        return Workspace(self, name, info if isinstance(info, dict) else {}, keep=keep)

    def open_workspace(self, name: str) -> "Workspace":
        """An existing workspace (raises NotFoundError); not removed by a ``with`` block."""
        for w in self.workspaces():
            if w.get("name") == name:
                return Workspace(self, name, w, keep=True)
        raise from_cli(1, "workspace %r: not found" % name, "not_found", [])

    def workspaces(self) -> List[Dict[str, Any]]:
        """The workspaces of the store, as ``strata ws list --json`` reports them."""
        out = self._json("ws", "list")
        return out if isinstance(out, list) else [out]

    def workspace_remove(self, name: str, force: bool = False) -> None:
        """Remove workspace ``name``; without ``force`` it refuses (ConflictError) when it has
        uncommitted changes. Raises NotFoundError when there is no such workspace."""
        args = ["ws", "rm", name]
        if force:
            args.append("--force")
        self._call(*args)

    # --- runs ----------------------------------------------------------------------

    def run(self, command: Command, from_: str = "main", *, patch: str = "", timeout: Optional[float] = None,
            env: Optional[Mapping[str, str]] = None, cwd: str = "", keep: bool = False, commit: str = "",
            root: str = "", at: str = "", scope: str = "",
            backend: str = "") -> RunResult:
        """Fork ``from_``, apply ``patch`` (its text), run ``command``, report, then discard the
        workspace (or ``keep`` it, or ``commit`` its changes to a branch): ``strata run``.
        ``root``, ``at``, ``scope`` and ``backend`` as for :meth:`workspace`
        (``raw["backend"]`` says which ran)."""
        out_dir = tempfile.mkdtemp(prefix="stratafs-run-")
        try:
            args = ["run", "--from", from_, "--output", out_dir]
            for flag, value in (("--root", root), ("--at", at), ("--scope", scope)):
                if value:
                    args += [flag, value]
            if timeout is not None:
                args += ["--timeout", "%dms" % int(timeout * 1000)]
            if keep:
                args.append("--keep")
            if commit:
                args += ["--commit", commit]
            if cwd:
                args += ["--cwd", cwd]
            if backend:
                args += ["--backend", backend]
            args += _env_flags(env)
            data = None
            if patch:
                args += ["--patch", "-"]
                data = patch.encode()
            start = time.monotonic()
            argv, code, out, err = self._raw(*args, "--", *_argv(command), input=data)
            # The exit status is the command's; the result object on stdout
            # says it ran. Without one, strata failed.
            res = None
            try:
                res = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
            except ValueError:
                pass
            if not isinstance(res, dict) or "exit_code" not in res or "error" in res and code == EXIT_STRATA:
                raise self._error(argv, code, err)
            total = time.monotonic() - start

            def read(name: str) -> str:
                try:
                    with open(os.path.join(out_dir, name), "rb") as f:
                        return f.read().decode("utf-8", "replace")
                except FileNotFoundError:
                    return ""

            d = _durations(res.get("durations_ns", {}))
            d.setdefault("total", total)
            return RunResult(exit_code=res.get("exit_code", 0), stdout=read("stdout"), stderr=read("stderr"), durations=d,
                             timed_out=bool(res.get("timed_out")), id=res.get("id", ""), commit=res.get("commit", "") or "",
                             branch=res.get("branch", "") or "", workspace=res.get("workspace", "") or "",
                             diff=res.get("diff", {}), raw=res)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)

    def batch(self, jobs: Iterable[Union[Job, Mapping[str, Any]]], parallel: int = 4, *,
              backend: str = "") -> Iterator[JobResult]:
        """Run ``jobs`` (``Job``s, or dicts in ``strata batch``'s line format), ``parallel`` at once,
        yielding each :class:`JobResult` as it finishes (not in order). ``backend`` is every job's
        that names none (as for :meth:`workspace`)."""
        self.version()
        lines = [json.dumps(j.to_json() if isinstance(j, Job) else dict(j)) for j in jobs]
        fd, path = tempfile.mkstemp(prefix="stratafs-batch-", suffix=".jsonl")
        try:
            with os.fdopen(fd, "w") as f:
                f.write("\n".join(lines) + ("\n" if lines else ""))
            argv = self._base() + ["batch", "--parallel", str(max(1, parallel)), path]
            if backend:
                argv[-1:-1] = ["--backend", backend]
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._popen_env())
            try:
                assert p.stdout is not None
                for raw in p.stdout:
                    if not raw.strip():
                        continue
                    r = json.loads(raw)
                    yield JobResult(id=r.get("id", ""), index=r.get("index", 0),
                                    exit_code=r.get("exit_code", EXIT_STRATA if r.get("error") else 0),
                                    stdout=r.get("stdout_tail", ""), stderr=r.get("stderr_tail", ""),
                                    timed_out=bool(r.get("timed_out")), durations=_durations(r.get("durations_ns", {})),
                                    error=r.get("error", ""), error_kind=r.get("error_kind", ""), raw=r)
                assert p.stderr is not None
                err = p.stderr.read().decode("utf-8", "replace")
                # 4: every job ran and some failed; each result says how.
                if p.wait() not in (0, EXIT_JOBS_FAILED):
                    raise self._error(argv, p.returncode, err)
            finally:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait()
        finally:
            os.unlink(path)


class Workspace:
    """A workspace of a :class:`Store`. As a context manager, removed on exit unless ``keep``."""

    def __init__(self, store: Store, name: str, info: Dict[str, Any], *, keep: bool = False) -> None:
        self.store = store
        self.name = name
        self.info = info
        self.keep = keep

    def __repr__(self) -> str:
        return "Workspace(%r)" % self.name

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.keep:
            self.remove(force=True)

    def exec(self, command: Command, *, timeout: Optional[float] = None, cwd: str = "",
             env: Optional[Mapping[str, str]] = None, stdin: Union[str, bytes, None] = None,
             sandbox: str = "") -> Result:
        """Run ``command`` (argv list, or a string for ``sh -c``) in the workspace: ``strata exec``.

        Returns a :class:`Result`; a non-zero exit is not an error. At ``timeout``
        seconds the command and everything it started are killed and the result
        has ``timed_out`` and exit code 124. Raises a StrataError when strata
        itself fails (exit 125: no such workspace, the sandbox cannot be set up).
        """
        args = ["exec", self.name]
        if cwd:
            args += ["--cwd", cwd]
        if sandbox:
            args += ["--sandbox", sandbox]
        args += _env_flags(env)
        argv = self.store._base() + args + ["--", *_argv(command)]
        self.store.version()
        data = stdin.encode() if isinstance(stdin, str) else stdin
        start = time.monotonic()
        # A session of its own: a timeout kills the strata client, and the
        # keeper then kills the command's process group.
        p = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.store._popen_env(),
                             start_new_session=True)
        timed_out = False
        try:
            out, err = p.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            p.kill()
            out, err = p.communicate()
        except BaseException:
            p.kill()
            p.wait()
            raise
        total = time.monotonic() - start
        so, se = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        if timed_out:
            return Result(EXIT_TIMEOUT, so, se, {"total": total}, timed_out=True)
        if p.returncode == EXIT_STRATA and _strata_error_line(se):
            # strata's own failure (the command never ran, or strata lost
            # it): its --json error line ends stderr.
            raise Store._error(argv, p.returncode, se)
        return Result(p.returncode, so, se, {"total": total})

    def diff(self) -> str:
        """The workspace's changes since its base (uncommitted included) as a git-style patch."""
        return self.store._call("diff", "--patch", self.name)

    def changes(self) -> List[Dict[str, Any]]:
        """The changed paths (``path``, ``status``, ``added``, ``deleted``)."""
        out = self.store._json("diff", self.name)
        return out if isinstance(out, list) else ([out] if out else [])

    def commit(self, message: str = "") -> Dict[str, Any]:
        """Commit the workspace's changes on its branch (ConflictError if the branch moved)."""
        args = ["commit", self.name]
        if message:
            args += ["--message", message]
        return self.store._json(*args)

    def reset(self, ref: str = "") -> Dict[str, Any]:
        """Drop uncommitted changes; with ``ref``, also move the workspace and its branch there."""
        args = ["reset", self.name]
        if ref:
            args.append(ref)
        out = self.store._json(*args)
        return out if isinstance(out, dict) else {}

    def promote(self, into: str = "") -> Dict[str, Any]:
        """Merge the workspace's branch into the branch it was forked from (or ``into``)."""
        args = ["promote", self.name]
        if into:
            args += ["--into", into]
        return self.store._json(*args)

    def path(self) -> str:
        """A host path of the workspace's merged view (starts its keeper)."""
        out = self.store._json("ws", "path", self.name)
        return out.get("path", "") if isinstance(out, dict) else str(out)

    def remove(self, force: bool = False) -> None:
        """Remove the workspace (see :meth:`Store.workspace_remove`)."""
        self.store.workspace_remove(self.name, force=force)
