"""Thread store: round trips, id validation, file modes, crash consistency of the log."""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import platformdirs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec import Raw

from threadline.ids import InvalidId, new_id
from threadline.store import (
    ItemEntry,
    LogEntry,
    StoreCorrupt,
    ThreadRecord,
    ThreadStore,
    TurnCompletedEntry,
    TurnStartedEntry,
    turns_from_log,
)


def make_rec(thread_id: str | None = None, **kw: Any) -> ThreadRecord:
    fields: dict[str, Any] = {
        "id": new_id() if thread_id is None else thread_id,
        "backend": "mock",
        "cwd": "/tmp/project",
        "created_at": 1_700_000_000,
        "updated_at": 1_700_000_000,
    }
    fields.update(kw)
    return ThreadRecord(**fields)


def item(n: int, text: str = "hi") -> Raw:
    return Raw(msgspec.json.encode({"type": "agentMessage", "id": f"item-{n}", "text": text}))


def norm(entries: list[LogEntry]) -> list[dict[str, Any]]:
    """Entries as plain values, so Raw fields compare by JSON content, not bytes."""

    def value(v: Any) -> Any:
        if isinstance(v, Raw):
            return msgspec.json.decode(v) if v else None
        return v

    return [
        {"kind": type(e).__name__} | {k: value(v) for k, v in msgspec.structs.asdict(e).items()}
        for e in entries
    ]


@pytest.fixture
def store(tmp_path: Path) -> ThreadStore:
    return ThreadStore(tmp_path / "home")


def thread_path(store: ThreadStore, thread_id: str, name: str = "") -> Path:
    p = store.root / "threads" / thread_id
    return p / name if name else p


# --- metadata -----------------------------------------------------------------------------


async def test_round_trip_create_load_save_list(store: ThreadStore) -> None:
    a = make_rec(model="sonnet", settings={"approvalPolicy": "never", "config": {"x": [1, 2]}})
    b = make_rec(updated_at=1_700_000_500, name="second", preview="hello")
    await store.create(a)
    await store.create(b)

    assert await store.load(a.id) == a
    assert await store.load(b.id) == b
    assert await store.load(new_id()) is None
    assert await store.list() == [b, a]  # most recently updated first

    a.updated_at = 1_700_001_000
    a.turn_count = 3
    a.backend_session_id = "sess-1"
    a.role_bootstrap_applied = True
    await store.save(a)
    assert await store.load(a.id) == a
    assert await store.list() == [a, b]


async def test_double_create_raises_and_keeps_original(store: ThreadStore) -> None:
    rec = make_rec(name="original")
    await store.create(rec)
    with pytest.raises(FileExistsError):
        await store.create(make_rec(rec.id, name="impostor"))
    loaded = await store.load(rec.id)
    assert loaded is not None and loaded.name == "original"


async def test_save_of_uncreated_thread_fails(store: ThreadStore) -> None:
    with pytest.raises(FileNotFoundError):
        await store.save(make_rec())


async def test_unknown_fields_are_ignored(store: ThreadStore) -> None:
    rec = make_rec()
    await store.create(rec)
    meta = thread_path(store, rec.id, "meta.json")
    doc = msgspec.json.decode(meta.read_bytes())
    doc["future_field"] = {"nested": True}
    doc["schema_version"] = 7
    meta.write_bytes(msgspec.json.encode(doc))
    loaded = await store.load(rec.id)
    assert loaded is not None and loaded.id == rec.id and loaded.schema_version == 7

    tid = new_id()
    line = {"kind": "turnStarted", "turn_id": tid, "started_at": 5, "future": [1]}
    thread_path(store, rec.id, "log.jsonl").write_bytes(msgspec.json.encode(line) + b"\n")
    assert await store.read_log(rec.id) == [TurnStartedEntry(turn_id=tid, started_at=5)]


async def test_unencodable_settings_fail_before_touching_disk(store: ThreadStore) -> None:
    with pytest.raises(TypeError):
        await store.create(make_rec(settings={"bad": object()}))
    assert not store.root.exists()


# --- ids ----------------------------------------------------------------------------------

BAD_IDS = [
    "../../etc",
    "/etc/passwd",
    "a/b",
    "",
    str(new_id()).upper(),
    new_id()[:8] + "\x00" + new_id()[9:],
    new_id() + "\x00",
    new_id() + "\n",  # `$` in a regex also matches before a trailing newline
    new_id() + "/..",
]


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_invalid_ids_raise_before_any_file_access(tmp_path: Path, bad: str) -> None:
    root = tmp_path / "home"
    store = ThreadStore(root)
    entry = TurnStartedEntry(turn_id=new_id(), started_at=1)
    with pytest.raises(InvalidId):
        await store.create(make_rec(bad))
    with pytest.raises(InvalidId):
        await store.save(make_rec(bad))
    with pytest.raises(InvalidId):
        await store.load(bad)
    with pytest.raises(InvalidId):
        await store.append(bad, [entry])
    with pytest.raises(InvalidId):
        await store.append(bad, [])
    with pytest.raises(InvalidId):
        await store.read_log(bad)
    with pytest.raises(InvalidId):
        await store.delete(bad)
    assert not root.exists()
    assert os.listdir(tmp_path) == []


# --- modes --------------------------------------------------------------------------------


@pytest.fixture(params=[0o000, 0o022, 0o277], ids=["umask0", "umask022", "umask277"])
def umask(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    # Depends on tmp_path so pytest's own directory exists before the umask changes.
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


async def test_modes_are_0700_and_0600_whatever_the_umask(store: ThreadStore, umask: int) -> None:
    rec = make_rec()
    await store.create(rec)
    await store.append(rec.id, [TurnStartedEntry(turn_id=new_id(), started_at=1)])
    await store.save(rec)  # a fresh temp file replaces meta.json
    tdir = thread_path(store, rec.id)
    assert mode(store.root) == 0o700
    assert mode(store.root / "threads") == 0o700
    assert mode(tdir) == 0o700
    assert mode(tdir / "meta.json") == 0o600
    assert mode(tdir / "log.jsonl") == 0o600
    assert sorted(p.name for p in tdir.iterdir()) == ["log.jsonl", "meta.json"]


# --- corruption and leftovers -------------------------------------------------------------


async def test_corrupt_meta_is_skipped_by_list_and_raises_on_load(
    store: ThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad = make_rec(), make_rec()
    await store.create(good)
    await store.create(bad)
    meta = thread_path(store, bad.id, "meta.json")
    meta.write_bytes(meta.read_bytes()[:20])  # a torn write that bypassed the atomic path

    with caplog.at_level(logging.WARNING):
        assert await store.list() == [good]
    assert bad.id in caplog.text
    with pytest.raises(StoreCorrupt) as exc_info:
        await store.load(bad.id)
    assert exc_info.value.path == meta
    assert str(meta) in str(exc_info.value)

    meta.write_bytes(b'{"id": 42}')  # valid JSON, wrong shape
    with pytest.raises(StoreCorrupt):
        await store.load(bad.id)


async def test_meta_of_another_thread_is_corrupt(store: ThreadStore) -> None:
    rec = make_rec()
    await store.create(rec)
    other = new_id()
    thread_path(store, rec.id).rename(thread_path(store, other))
    with pytest.raises(StoreCorrupt, match="does not match"):
        await store.load(other)
    assert await store.list() == []


async def test_foreign_entries_and_half_created_threads_are_skipped(store: ThreadStore) -> None:
    rec = make_rec()
    await store.create(rec)
    threads = store.root / "threads"
    (threads / "notes.txt").write_text("hello")
    (threads / "not-a-thread").mkdir()
    (threads / ".hidden").mkdir()
    half = new_id()
    (threads / half).mkdir()  # a create that crashed before meta.json was written
    (threads / half / "log.jsonl").write_text("stale\n")
    assert await store.list() == [rec]
    assert await store.load(half) is None

    # Creating over the remains works, and the new thread does not inherit the stale log.
    await store.create(make_rec(half))
    assert await store.read_log(half) == []
    assert {r.id for r in await store.list()} == {rec.id, half}


async def test_leftover_tmp_files_are_ignored(store: ThreadStore) -> None:
    rec = make_rec()
    await store.create(rec)
    tdir = thread_path(store, rec.id)
    # What an atomic write interrupted before its rename leaves behind.
    (tdir / ".meta.json.abc123.tmp").write_bytes(b'{"id": "half')
    (tdir / ".meta.json.def456.tmp").write_bytes(b"")
    assert await store.load(rec.id) == rec
    assert await store.list() == [rec]
    rec.name = "renamed"
    await store.save(rec)
    assert await store.load(rec.id) == rec


async def test_delete(store: ThreadStore) -> None:
    keep, gone = make_rec(), make_rec()
    await store.create(keep)
    await store.create(gone)
    await store.append(gone.id, [TurnStartedEntry(turn_id=new_id(), started_at=1)])
    await store.delete(gone.id)
    assert await store.load(gone.id) is None
    assert await store.read_log(gone.id) == []
    assert await store.list() == [keep]
    assert not thread_path(store, gone.id).exists()
    assert list((store.root / "threads" / ".trash").iterdir()) == []
    await store.delete(gone.id)  # idempotent
    await store.delete(new_id())  # never existed
    await store.create(gone)  # the id is free again
    assert await store.read_log(gone.id) == []


# --- environment --------------------------------------------------------------------------


def test_from_env_honours_threadline_home(tmp_path: Path) -> None:
    assert ThreadStore.from_env({"THREADLINE_HOME": str(tmp_path)}).root == tmp_path
    default = Path(platformdirs.user_data_dir("threadline", appauthor=False))
    assert ThreadStore.from_env({}).root == default
    assert ThreadStore.from_env({"THREADLINE_HOME": ""}).root == default


def test_from_env_reads_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path / "x"))
    assert ThreadStore.from_env().root == tmp_path / "x"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THREADLINE_HOME", "rel")
    assert ThreadStore.from_env().root == tmp_path / "rel"  # made absolute


# --- log ----------------------------------------------------------------------------------


async def test_append_and_read_log(store: ThreadStore) -> None:
    rec = make_rec()
    await store.create(rec)
    assert await store.read_log(rec.id) == []
    t = new_id()
    entries: list[LogEntry] = [
        TurnStartedEntry(turn_id=t, started_at=10),
        ItemEntry(turn_id=t, item=item(1, "line one\nline two"), completed_at_ms=10_500),
    ]
    await store.append(rec.id, entries)
    await store.append(rec.id, [], sync=True)  # no-op
    done = TurnCompletedEntry(turn_id=t, status="completed", completed_at=11, duration_ms=1000)
    await store.append(rec.id, [done], sync=True)
    assert await store.read_log(rec.id) == [*entries, done]
    # One JSON object per line, and an absent error is absent, not null.
    lines = thread_path(store, rec.id, "log.jsonl").read_bytes().splitlines()
    assert len(lines) == 3
    assert b"error" not in lines[2]


async def test_append_to_unknown_thread_fails(store: ThreadStore) -> None:
    with pytest.raises(FileNotFoundError):
        await store.append(new_id(), [TurnStartedEntry(turn_id=new_id(), started_at=1)])
    assert not store.root.exists()


async def test_pretty_printed_raw_stays_on_one_line(store: ThreadStore) -> None:
    rec = make_rec()
    await store.create(rec)
    pretty = Raw(b'{\n  "type": "agentMessage",\n  "id": "i",\n  "text": "a\\nb"\n}')
    err = Raw(b'{\n  "message": "boom"\n}')
    t = new_id()
    await store.append(
        rec.id,
        [
            ItemEntry(turn_id=t, item=pretty, completed_at_ms=1),
            TurnCompletedEntry(turn_id=t, status="failed", completed_at=2, error=err),
        ],
    )
    assert len(thread_path(store, rec.id, "log.jsonl").read_bytes().splitlines()) == 2
    got = await store.read_log(rec.id)
    assert isinstance(got[0], ItemEntry) and isinstance(got[1], TurnCompletedEntry)
    assert msgspec.json.decode(got[0].item) == msgspec.json.decode(pretty)
    assert msgspec.json.decode(got[1].error) == {"message": "boom"}


@pytest.mark.parametrize("raw", [b"", b"{not json", b'{"a": 1} {"b": 2}', b'{"a": '])
async def test_invalid_raw_is_refused_and_nothing_written(store: ThreadStore, raw: bytes) -> None:
    rec = make_rec()
    await store.create(rec)
    t = new_id()
    good = TurnStartedEntry(turn_id=t, started_at=1)
    with pytest.raises(ValueError):
        await store.append(rec.id, [good, ItemEntry(turn_id=t, item=Raw(raw), completed_at_ms=1)])
    assert await store.read_log(rec.id) == []


async def test_torn_last_line_is_skipped_and_next_append_recovers(
    store: ThreadStore, caplog: pytest.LogCaptureFixture
) -> None:
    rec = make_rec()
    await store.create(rec)
    t = new_id()
    first: list[LogEntry] = [
        TurnStartedEntry(turn_id=t, started_at=1),
        ItemEntry(turn_id=t, item=item(1), completed_at_ms=2),
    ]
    await store.append(rec.id, first)
    log_file = thread_path(store, rec.id, "log.jsonl")
    size = log_file.stat().st_size
    await store.append(rec.id, [ItemEntry(turn_id=t, item=item(2), completed_at_ms=3)])
    os.truncate(log_file, size + 25)  # kill -9 in the middle of the second write

    with caplog.at_level(logging.WARNING):
        assert await store.read_log(rec.id) == first
    assert "torn" in caplog.text

    # The next append must not glue its first line onto the torn fragment.
    done = TurnCompletedEntry(turn_id=t, status="completed", completed_at=4)
    await store.append(rec.id, [done])
    assert await store.read_log(rec.id) == [*first, done]


async def test_corrupt_middle_line_is_skipped(store: ThreadStore) -> None:
    rec = make_rec()
    await store.create(rec)
    t = new_id()
    a = TurnStartedEntry(turn_id=t, started_at=1)
    b = TurnCompletedEntry(turn_id=t, status="completed", completed_at=2)
    path = thread_path(store, rec.id, "log.jsonl")
    path.write_bytes(
        msgspec.json.encode(a)
        + b"\n\x00\x00\x00\n\n"
        + b'{"kind":"fromTheFuture","turn_id":"x"}\n'
        + b"[1,2]\n"
        + msgspec.json.encode(b)
        + b"\n"
    )
    assert await store.read_log(rec.id) == [a, b]


async def test_concurrent_appends(store: ThreadStore) -> None:
    recs = [make_rec() for _ in range(4)]
    for rec in recs:
        await store.create(rec)
    n = 25

    async def writer(thread_id: str, k: int) -> None:
        for i in range(n):
            e = ItemEntry(turn_id=thread_id, item=item(k * 1000 + i, "x" * 5000), completed_at_ms=i)
            await store.append(thread_id, [e], sync=i % 10 == 0)

    async with trio.open_nursery() as nursery:
        for rec in recs:
            for k in range(2):  # two writers on the same thread too
                nursery.start_soon(writer, rec.id, k)

    for rec in recs:
        got = await store.read_log(rec.id)
        assert len(got) == 2 * n
        ids = [msgspec.json.decode(e.item)["id"] for e in got if isinstance(e, ItemEntry)]
        assert sorted(ids) == sorted(f"item-{k * 1000 + i}" for k in range(2) for i in range(n))


# --- turns_from_log -----------------------------------------------------------------------


def test_turns_from_log_groups_items_and_marks_unfinished_turn_interrupted() -> None:
    t1, t2, t3 = new_id(), new_id(), new_id()
    err = Raw(b'{"message":"boom"}')
    entries: list[LogEntry] = [
        TurnStartedEntry(turn_id=t1, started_at=100),
        ItemEntry(turn_id=t1, item=item(1), completed_at_ms=100_100),
        ItemEntry(turn_id=t1, item=item(2), completed_at_ms=100_200),
        TurnCompletedEntry(turn_id=t1, status="completed", completed_at=101, duration_ms=900),
        TurnStartedEntry(turn_id=t2, started_at=200),
        ItemEntry(turn_id=t2, item=item(3), completed_at_ms=200_100),
        TurnCompletedEntry(turn_id=t2, status="failed", completed_at=201, error=err),
        TurnCompletedEntry(turn_id=t2, status="completed", completed_at=202),  # ignored
        TurnStartedEntry(turn_id=t3, started_at=300),
        ItemEntry(turn_id=t3, item=item(4), completed_at_ms=300_100),
        # crash: no turnCompleted for t3
    ]
    turns = turns_from_log(entries)
    assert [t.turn_id for t in turns] == [t1, t2, t3]
    one, two, three = turns
    assert (one.status, one.started_at, one.completed_at, one.duration_ms) == (
        "completed",
        100,
        101,
        900,
    )
    assert one.items == [item(1), item(2)] and not one.error
    assert (two.status, two.completed_at, two.error) == ("failed", 201, err)
    assert two.items == [item(3)]
    assert three.status == "interrupted"
    assert (three.started_at, three.completed_at, three.duration_ms) == (300, None, None)
    assert three.items == [item(4)]

    # The turn this process is still running is not interrupted.
    assert turns_from_log(entries, active_turn_id=t3)[2].status == "inProgress"
    assert turns_from_log(entries, active_turn_id=t1)[0].status == "completed"


def test_turns_from_log_without_start_line() -> None:
    t = new_id()
    turns = turns_from_log(
        [
            ItemEntry(turn_id=t, item=item(1), completed_at_ms=5),
            TurnCompletedEntry(turn_id=t, status="interrupted", completed_at=6),
        ]
    )
    assert len(turns) == 1
    assert (turns[0].status, turns[0].started_at, turns[0].items) == (
        "interrupted",
        None,
        [item(1)],
    )
    assert turns_from_log([]) == []


# --- property: a crash at any byte offset ---------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
raw_objects = st.builds(
    lambda d, pretty: Raw(msgspec.json.format(msgspec.json.encode(d), indent=2 if pretty else 0)),
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    st.booleans(),
)
turn_ids = st.sampled_from([new_id() for _ in range(3)])
ints = st.integers(0, 2**62)
log_entries: st.SearchStrategy[LogEntry] = st.one_of(
    st.builds(TurnStartedEntry, turn_id=turn_ids, started_at=ints),
    st.builds(ItemEntry, turn_id=turn_ids, item=raw_objects, completed_at_ms=ints),
    st.builds(
        TurnCompletedEntry,
        turn_id=turn_ids,
        status=st.sampled_from(["completed", "interrupted", "failed"]),
        completed_at=ints,
        duration_ms=st.none() | ints,
        error=st.just(Raw()) | raw_objects,
    ),
)
batches = st.lists(st.lists(log_entries, min_size=1, max_size=4), min_size=1, max_size=5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches, cut=st.floats(0, 1), after=st.lists(log_entries, max_size=3))
async def test_log_truncated_anywhere_reads_back_a_prefix(
    batches: list[list[LogEntry]], cut: float, after: list[LogEntry]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = ThreadStore(Path(tmp))
        rec = make_rec()
        await store.create(rec)
        for batch in batches:
            await store.append(rec.id, batch)
        appended = [e for batch in batches for e in batch]
        path = Path(tmp) / "threads" / rec.id / "log.jsonl"
        data = path.read_bytes()
        newlines = [i for i, b in enumerate(data) if b == 0x0A]
        assert len(newlines) == len(appended)  # one line per entry

        offset = round(cut * len(data))
        os.truncate(path, offset)
        got = await store.read_log(rec.id)
        # Exactly the entries whose bytes all survived (the newline itself may be lost).
        complete = sum(1 for nl in newlines if nl <= offset)
        assert norm(got) == norm(appended[:complete])

        # Writing on after the crash loses nothing more.
        if after:
            await store.append(rec.id, after)
        assert norm(await store.read_log(rec.id)) == norm(appended[:complete] + after)


@settings(max_examples=200, deadline=None)
@given(junk=st.binary(max_size=400))
async def test_read_log_never_raises_for_content(junk: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = ThreadStore(Path(tmp))
        rec = make_rec()
        await store.create(rec)
        path = Path(tmp) / "threads" / rec.id / "log.jsonl"
        path.write_bytes(junk)
        before = await store.read_log(rec.id)
        entry = TurnStartedEntry(turn_id=new_id(), started_at=1)
        await store.append(rec.id, [entry])
        assert await store.read_log(rec.id) == [*before, entry]
