"""Crash-consistent persistence of threads: an atomically replaced metadata record and an
append-only JSONL log per thread.

Guarantees, including after `kill -9` at any moment:
- `meta.json` is only ever replaced by rename of a fully written and fsynced temp file, so a
  reader sees the old or the new record, never a mix. A crash leaves at most a stray
  `.meta.json.*.tmp` next to it, which nothing reads.
- Each `append` is one `os.write` of whole lines on an O_APPEND fd, so a crash can tear only the
  last line. Reading skips a torn or corrupt line with a warning and keeps everything else; the
  next append first terminates a torn tail so it cannot glue onto the new line.
- Deleting renames the thread directory away in one step, so a thread is either listed whole
  or not at all.

All blocking file I/O runs in `trio.to_thread.run_sync` (not abandoned on cancel, so a write
that has started always finishes and releases its lock cleanly).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import logging
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
import trio

from threadline.store.paths import (
    LOG_NAME,
    META_NAME,
    THREADS_DIR,
    TRASH_DIR,
    checked_thread_id,
    default_root,
    is_thread_id,
    log_path,
    meta_path,
    thread_dir,
)
from threadline.store.records import (
    NO_ERROR,
    ItemEntry,
    LogEntry,
    ThreadRecord,
    TurnCompletedEntry,
    TurnStartedEntry,
)

__all__ = ["StoreCorrupt", "ThreadStore"]

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
_TMP_PREFIX = f".{META_NAME}."
_TMP_SUFFIX = ".tmp"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class StoreCorrupt(Exception):
    """A store file exists but cannot be decoded (or belongs to another thread)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"corrupt thread store file {path}: {reason}")
        self.path = path
        self.reason = reason


class ThreadStore:
    """Per-thread metadata and event log under `root` (see `threadline.store.paths`).

    Every thread id is validated (`paths.checked_thread_id`, i.e. `threadline.ids.validate_id`)
    before any path is built, so a bad id raises `InvalidId` without touching the disk.
    Ephemeral threads are simply never handed to the store by the server.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        # Serializes writers of one thread (meta replaces must land in call order; appends
        # must not interleave with the torn-tail check). trio.Lock is FIFO-fair.
        self._locks: dict[str, trio.Lock] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ThreadStore:
        """Root from $THREADLINE_HOME, else platformdirs' user data dir."""
        return cls(default_root(env))

    def _lock(self, thread_id: str) -> trio.Lock:
        lock = self._locks.get(thread_id)
        if lock is None:
            lock = self._locks[thread_id] = trio.Lock()
        return lock

    async def create(self, rec: ThreadRecord) -> None:
        """Persist a new thread. FileExistsError if it already has a metadata record."""
        checked_thread_id(rec.id)
        data = _encode_meta(rec)  # before any disk access: unencodable settings fail cleanly
        async with self._lock(rec.id):
            await trio.to_thread.run_sync(_create_sync, self.root, rec.id, data)

    async def save(self, rec: ThreadRecord) -> None:
        """Atomically replace the metadata record of an existing (created) thread."""
        checked_thread_id(rec.id)
        data = _encode_meta(rec)
        async with self._lock(rec.id):
            await trio.to_thread.run_sync(_write_atomic, meta_path(self.root, rec.id), data)

    def exists(self, thread_id: str) -> bool:
        """Whether a thread of that id is stored (blocking: a stat)."""
        return is_thread_id(thread_id) and meta_path(self.root, thread_id).is_file()

    async def load(self, thread_id: str) -> ThreadRecord | None:
        """The thread's record, None if absent; StoreCorrupt if its meta.json is unreadable."""
        checked_thread_id(thread_id)
        return await trio.to_thread.run_sync(_load_sync, self.root, thread_id)

    async def list(self) -> builtins.list[ThreadRecord]:
        """Every loadable thread record, most recently updated first.

        Corrupt records and foreign directory entries are skipped with a warning, so one bad
        file never hides the other threads.
        """
        return await trio.to_thread.run_sync(_list_sync, self.root)

    async def append(
        self, thread_id: str, entries: Sequence[LogEntry], *, sync: bool = False
    ) -> None:
        """Append entries to the thread's log in one write.

        Once this returns, the entries survive a crash of this process (they are in the OS
        page cache); with `sync=True` they are also fsynced and survive power loss.

        The thread must have been created (FileNotFoundError otherwise). Raises ValueError,
        before writing anything, if an entry does not encode to one valid JSON line (e.g. an
        `item` Raw that is not valid JSON).
        """
        path = log_path(self.root, thread_id)
        if not entries:
            return
        async with self._lock(thread_id):
            # A snapshot: the worker thread must not see the caller's list change under it.
            await trio.to_thread.run_sync(_append_sync, path, tuple(entries), sync)

    async def read_log(self, thread_id: str) -> builtins.list[LogEntry]:
        """All decodable log entries in order; [] if the thread has no log.

        A torn or corrupt line is skipped with a warning; this never raises for file content.
        """
        path = log_path(self.root, thread_id)
        return await trio.to_thread.run_sync(_read_log_sync, path)

    async def delete(self, thread_id: str) -> None:
        """Remove the thread and its log. A no-op if it does not exist."""
        tdir = thread_dir(self.root, thread_id)
        lock = self._lock(thread_id)
        async with lock:
            await trio.to_thread.run_sync(_delete_sync, tdir)
            # Forget the lock unless someone is queued on it; no checkpoint between this check
            # and the release, so nobody can start waiting on the orphaned lock.
            if lock.statistics().tasks_waiting == 0:
                self._locks.pop(thread_id, None)


# --- blocking helpers (run in worker threads) ------------------------------------------------


def _encode_meta(rec: ThreadRecord) -> bytes:
    # Indented: meta.json is small and people read it when debugging.
    return msgspec.json.format(msgspec.json.encode(rec), indent=2) + b"\n"


def _decode_meta(path: Path, data: bytes, thread_id: str) -> ThreadRecord:
    try:
        rec = msgspec.json.decode(data, type=ThreadRecord)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise StoreCorrupt(path, str(exc)) from exc
    if rec.id != thread_id:
        raise StoreCorrupt(path, f"record id {rec.id!r} does not match its directory")
    return rec


def _make_dir(path: Path) -> bool:
    """Create `path` with mode exactly 0700 whatever the umask; False if it existed."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return False
    os.chmod(path, DIR_MODE)  # mkdir's mode is masked by the umask
    return True


def _fsync_dir(path: Path) -> None:
    """Make a rename/creation in `path` durable. Best effort: not every OS or filesystem
    lets a directory be opened or fsynced, and the data itself is already synced."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    # One os.write in practice; the loop only covers a short write (signal, nearly full disk).
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_atomic(path: Path, data: bytes) -> None:
    """tmp in the same directory (same filesystem, so rename is atomic), write, fsync,
    os.replace, fsync the directory."""
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=path.parent)
    try:
        try:
            os.fchmod(fd, FILE_MODE)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _ensure_threads_dir(root: Path) -> Path:
    # Ancestors of root (e.g. ~/.local/share) get default modes; our own dirs get 0700.
    root.parent.mkdir(parents=True, exist_ok=True)
    if _make_dir(root):
        _fsync_dir(root.parent)
    threads = root / THREADS_DIR
    if _make_dir(threads):
        _fsync_dir(root)
    return threads


def _create_sync(root: Path, thread_id: str, data: bytes) -> None:
    threads = _ensure_threads_dir(root)
    tdir = thread_dir(root, thread_id)
    meta = tdir / META_NAME
    if _make_dir(tdir):
        _fsync_dir(threads)
    else:
        if meta.exists():
            raise FileExistsError(errno.EEXIST, f"thread {thread_id} already exists", str(meta))
        # A directory without meta.json is what a crash during create leaves behind; anything
        # in it belongs to no thread, so a new thread must not inherit a stale log.
        (tdir / LOG_NAME).unlink(missing_ok=True)
    _write_atomic(meta, data)


def _load_sync(root: Path, thread_id: str) -> ThreadRecord | None:
    path = meta_path(root, thread_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except (IsADirectoryError, NotADirectoryError) as exc:
        raise StoreCorrupt(path, str(exc)) from exc
    return _decode_meta(path, data, thread_id)


def _list_sync(root: Path) -> list[ThreadRecord]:
    threads = root / THREADS_DIR
    records: list[ThreadRecord] = []
    try:
        entries = os.scandir(threads)
    except FileNotFoundError:
        return records
    with entries:
        for entry in entries:
            name = entry.name
            if not is_thread_id(name):
                # Dot names are ours (.trash) or hidden files: not worth a warning.
                if not name.startswith("."):
                    log.warning("thread store: ignoring foreign entry %s", entry.path)
                continue
            try:
                rec = _load_sync(root, name)
            except (StoreCorrupt, OSError) as exc:
                log.warning("thread store: skipping thread %s: %s", name, exc)
                continue
            if rec is None:
                # No meta.json: a create that crashed before its first write. Not a thread.
                log.debug("thread store: skipping %s without %s", entry.path, META_NAME)
                continue
            records.append(rec)
    records.sort(key=lambda r: (r.updated_at, r.id), reverse=True)
    return records


_ENTRY_TYPES = (TurnStartedEntry, ItemEntry, TurnCompletedEntry)


def _encode_entries(entries: Sequence[LogEntry]) -> bytes:
    lines: list[bytes] = []
    for entry in entries:
        if not isinstance(entry, _ENTRY_TYPES):
            raise TypeError(f"not a log entry: {entry!r}")
        if (
            isinstance(entry, TurnCompletedEntry)
            and not entry.error
            and entry.error is not NO_ERROR
        ):
            entry = msgspec.structs.replace(entry, error=NO_ERROR)  # see NO_ERROR
        line = msgspec.json.encode(entry)
        try:
            if b"\n" in line:
                # Only a Raw field (pretty-printed JSON) can hold a raw newline, since JSON
                # strings escape theirs; minify it so the entry stays on one line.
                line = msgspec.json.format(line, indent=-1)
            # A Raw that is not valid JSON would make the whole line unreadable later, losing
            # the entry silently; refuse it now instead.
            msgspec.json.decode(line, type=LogEntry)
        except msgspec.DecodeError as exc:
            raise ValueError(f"log entry does not encode to one valid JSON line: {exc}") from exc
        lines.append(line)
    lines.append(b"")
    return b"\n".join(lines)


def _open_log(path: Path) -> tuple[int, bool]:
    """Open for append (O_RDWR, to peek at the tail), creating 0600; (fd, created)."""
    flags = os.O_RDWR | os.O_APPEND | _CLOEXEC
    while True:
        try:
            return os.open(path, flags), False
        except FileNotFoundError:
            pass
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE), True
        except FileExistsError:
            continue  # created by someone else in between: open it normally


def _append_sync(path: Path, entries: Sequence[LogEntry], sync: bool) -> None:
    data = _encode_entries(entries)
    fd, created = _open_log(path)
    try:
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)  # O_CREAT's mode is masked by the umask
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            # The previous writer crashed mid-line: end the torn line first, so it stays one
            # skippable line instead of swallowing the first entry written now.
            data = b"\n" + data
        _write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if created and sync:
        _fsync_dir(path.parent)


def _read_log_sync(path: Path) -> list[LogEntry]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    decoder = msgspec.json.Decoder(LogEntry)
    lines = data.split(b"\n")
    out: list[LogEntry] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(decoder.decode(line))
        except msgspec.DecodeError as exc:
            # The final fragment without a newline is the expected result of a crash during
            # append; anything else is damage (or a kind from a newer version).
            what = "torn last" if lineno == len(lines) else "corrupt"
            log.warning("thread store: %s:%d: skipping %s line: %s", path, lineno, what, exc)
    return out


def _delete_sync(tdir: Path) -> None:
    trash = tdir.parent / TRASH_DIR
    try:
        os.lstat(tdir)
    except FileNotFoundError:
        return
    _make_dir(trash)
    dest = trash / f"{tdir.name}.{secrets.token_hex(4)}"
    try:
        os.rename(tdir, dest)  # the thread disappears from threads/ in one step
    except FileNotFoundError:
        return
    _fsync_dir(tdir.parent)
    # If this is interrupted, the leftover sits in .trash, which list() never reads.
    if dest.is_symlink():
        dest.unlink()
    else:
        shutil.rmtree(dest)
