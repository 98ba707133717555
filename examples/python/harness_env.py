"""A harness "environment" backed by a strata workspace.

SWE-bench-style harnesses (SWE-ReX, mini-swe-agent, R2E-Gym) give an agent an
environment with one essential method: execute a command, return its output.
This adapter implements that interface over stratafs: each environment is a
workspace forked from a prepared branch in milliseconds, commands run in its
sandbox, and the result is the patch of what the agent changed.

    python3 examples/python/harness_env.py /path/to/project "python3 -m pytest -q"

Plug it into a harness by passing `StrataEnvironment(...)` where it expects
its environment (mini-swe-agent's `LocalEnvironment`, for instance, has the
same `execute(command, cwd=None, timeout=None) -> dict` shape).
"""

import os
import sys
import uuid
from typing import Any, Dict, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "src"))

import stratafs  # noqa: E402


class StrataEnvironment:
    """An agent's environment: one strata workspace, removed by close()."""

    def __init__(self, store: stratafs.Store, from_: str = "main", *, timeout: float = 600,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.store = store
        self.timeout = timeout
        self.env = dict(env or {})
        self.ws = store.workspace("env-" + uuid.uuid4().hex[:12], from_=from_)

    def execute(self, command: str, cwd: str = "", timeout: Optional[float] = None) -> Dict[str, Any]:
        """Run a shell command; return {"output", "returncode"} as harnesses expect."""
        r = self.ws.exec(command, cwd=cwd, env=self.env, timeout=timeout or self.timeout)
        out = r.stdout + r.stderr
        if r.timed_out:
            out += "\n[timed out after %ss]" % (timeout or self.timeout)
        return {"output": out, "returncode": r.exit_code}

    def patch(self) -> str:
        """What the agent changed, as a patch for the harness's evaluation step."""
        return self.ws.diff()

    def checkpoint(self, message: str) -> str:
        """Save the state (e.g. after an expensive setup) to fork further environments from."""
        return self.ws.commit(message)["commit"]

    def close(self) -> None:
        self.ws.remove(force=True)

    def __enter__(self) -> "StrataEnvironment":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: harness_env.py PROJECT_DIR COMMAND")
    store = stratafs.Store(os.environ.get("STRATA_HOME") or None)
    store.import_dir(sys.argv[1], branch="harness-base")
    with StrataEnvironment(store, from_="harness-base") as env:
        env.execute("echo '# touched by the agent' >> README.md")
        res = env.execute(sys.argv[2])
        print(res["output"], end="")
        print("returncode:", res["returncode"])
        print(env.patch(), end="")


if __name__ == "__main__":
    main()
