"""A fault-injecting stand-in for an agent CLI, given to threadline as `config.cliPath`.

It runs the REAL CLI with the same arguments, environment, stdin and stderr, and corrupts the
real CLI's stdout as `FAULT` says, so every fault sits on top of the real CLI's real protocol.
`harness.FaultCli` writes a small launcher (``#!`` to the test's Python) that sets the
variables below and runs this file.

Environment:

* ``FAULT_REAL_CLI``: the real executable; ``FAULT_REAL_ENV``: JSON of variables to add for it
  (Codex's npm launcher environment when the native binary is run directly).
* ``FAULT_ARMED``: a file; while it exists the fault applies to every new invocation. Once the
  test removes it, invocations are a plain ``execve`` of the real CLI (the healthy next turn).
* ``FAULT_TRIGGER`` (optional): stdout lines are counted from the first line containing this
  text (the scripted model answer carries it, so the fault lands mid-turn); without it, from
  the first line.
* ``FAULT``:

  - ``garbage-after:N``: after N lines, non-JSON lines (text, invalid UTF-8, a NUL byte) are
    written; the real output then continues unchanged.
  - ``truncate-after:N``: line N+1 is cut in half (no newline), a note goes to stderr, the real
    CLI is killed and the wrapper exits 1 (a CLI dying in the middle of a write).
  - ``huge-line-after:N``: line N+1 is inflated to 10 MB (a JSON object gets a 10 MB
    ``_faultPadding`` member, anything else gets a 10 MB non-JSON line before it); the output
    then continues unchanged.
  - ``exit-before-output:CODE``: a note goes to stderr and the wrapper exits CODE without
    starting the real CLI.
  - ``hang-after:N``: after N lines nothing more is written to stdout (the real output is
    drained and dropped); the wrapper never exits on its own, even once the real CLI has.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

HUGE = 10 * 1024 * 1024


def _note(text: str) -> None:
    sys.stderr.write(f"fault-cli: {text}\n")
    sys.stderr.flush()


def _inflate(line: bytes) -> bytes:
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    if isinstance(message, dict):
        message["_faultPadding"] = "x" * HUGE
        return json.dumps(message).encode() + b"\n"
    return b"#" * HUGE + b"\n" + line


def _hang_forever(stdout: object) -> None:
    # Drain the real CLI (so it never blocks on a full pipe), drop everything, never exit.
    assert hasattr(stdout, "read")
    while stdout.read(65536):  # type: ignore[attr-defined]
        pass
    while True:
        time.sleep(3600)


def main() -> None:
    real = os.environ["FAULT_REAL_CLI"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULT")}
    env.update(json.loads(os.environ.get("FAULT_REAL_ENV") or "{}"))
    argv = [real, *sys.argv[1:]]
    if not os.path.exists(os.environ["FAULT_ARMED"]):
        os.execve(real, argv, env)

    kind, _, arg = os.environ["FAULT"].partition(":")
    if kind == "exit-before-output":
        _note(f"exiting with status {arg} before any output (injected fault)")
        sys.exit(int(arg))
    kind = kind.removesuffix("-after")
    after = int(arg or "0")
    trigger = os.environ.get("FAULT_TRIGGER", "").encode() or None

    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE)
    assert child.stdout is not None
    out = sys.stdout.buffer
    counting = trigger is None
    count = 0
    fired = False
    for line in child.stdout:
        if not counting and trigger is not None and trigger in line:
            counting = True
        if counting and not fired and count == after:
            fired = True
            if kind == "garbage":
                out.write(b"this is not JSON {{{ (injected fault)\n")
                out.write(b"\xff\xfe invalid UTF-8 \xc3\x28 and a NUL \x00 here\n")
                out.write(b']]] {"unterminated": \n')
            elif kind == "huge-line":
                line = _inflate(line)
            elif kind == "truncate":
                out.write(line[: max(1, len(line.rstrip(b"\n")) // 2)])
                out.flush()
                _note(f"stdout cut in the middle of a line after {count} lines (injected fault)")
                child.send_signal(signal.SIGKILL)
                child.wait()
                os._exit(1)
            elif kind == "hang":
                out.flush()
                _hang_forever(child.stdout)
            else:
                _note(f"unknown fault {kind!r}")
                os._exit(2)
        out.write(line)
        out.flush()
        if counting:
            count += 1
    code = child.wait()
    out.flush()
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
