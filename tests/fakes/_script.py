"""The scripted rules every fake model server answers by; each API brings its own `Step`
(what one answer is) and its own way to find the human text and the step index.

Rules are tried in order against the text of the latest *human* user message
(case-insensitive substring); the first match wins, else the default rule. A rule's step k
answers the k-th model call since that human message (the API says how calls are counted), so
step 0 is the first answer, step 1 the answer after the first round of tool results, ...; the
last step repeats. A retry re-sends the same conversation, so it gets the same step.

A step is the API's `Step`, or shorthand (`Shorthands`): a `str` (one text block), one block,
a list of blocks, or an `HttpError`. Lists passed as ``steps``/``default`` are always lists
of *steps*.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

from ._base import Abort, FakeHandler, FakeServer, RecordedBase

__all__ = [
    "AnswerStep",
    "ScriptRule",
    "ScriptedFake",
    "Shorthands",
    "StepBase",
    "answer_failure",
    "scripted_step",
]


class HttpErrorLike(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def body(self) -> dict[str, Any]: ...
    @property
    def headers(self) -> Mapping[str, str]: ...


class AnswerStep(Protocol):
    """What the core needs of every API's `Step`."""

    @property
    def error(self) -> Any: ...
    @property
    def drop_connection(self) -> bool: ...


@dataclass(frozen=True, kw_only=True)
class StepBase:
    """What every API's answer step has (besides its blocks and its HTTP error): `delay_ms`
    between streamed deltas, `chunk_size` characters of text per delta, `close_midstream`
    (the connection dropped after the first delta: a transport error), `drop_connection`
    (closed without any answer)."""

    delay_ms: int = 0
    chunk_size: int = 16
    close_midstream: bool = False
    drop_connection: bool = False

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")


StepT = TypeVar("StepT", bound=AnswerStep)
RuleT = TypeVar("RuleT", bound="ScriptRule[Any]")
RecordT = TypeVar("RecordT", bound=RecordedBase)


@dataclass(frozen=True)
class Shorthands(Generic[StepT]):
    """Turns what a rule may list into one API's `Step`."""

    step: type[StepT]
    text: Callable[[str], Any]
    blocks: tuple[type, ...]
    error: type

    def __call__(self, value: Any) -> StepT:
        if isinstance(value, self.step):
            return value
        if isinstance(value, self.error):
            return self.step(error=value)  # type: ignore[call-arg]
        if isinstance(value, str):
            return self.step([self.text(value)])  # type: ignore[call-arg]
        if isinstance(value, self.blocks):
            return self.step([value])  # type: ignore[call-arg]
        return self.step(value)  # type: ignore[call-arg]


@dataclass(frozen=True)
class ScriptRule(Generic[StepT]):
    """Answer with `steps` when `match` is a (case-insensitive) substring of the latest human
    user message; ``match=""`` matches everything."""

    #: the API's shorthands (set by each API's `Rule`)
    shorthands: ClassVar[Shorthands[Any]]

    match: str
    steps: Sequence[Any]
    name: str | None = None  # shown in RecordedRequest.rule; defaults to `match`

    def __post_init__(self) -> None:
        if isinstance(self.steps, str) or not self.steps:
            raise ValueError("Rule.steps must be a non-empty list of steps")
        object.__setattr__(self, "steps", tuple(self.shorthands(s) for s in self.steps))

    @property
    def label(self) -> str:
        return self.name if self.name is not None else self.match

    def step(self, k: int) -> StepT:
        return cast(StepT, self.shorthands(self.steps[min(k, len(self.steps) - 1)]))


@dataclass(frozen=True)
class Script(Generic[RuleT]):
    rules: tuple[RuleT, ...]
    default: RuleT

    def pick(self, human_text: str) -> RuleT:
        lowered = human_text.lower()
        return next((r for r in self.rules if r.match.lower() in lowered), self.default)


class ScriptedFake(FakeServer, Generic[RuleT, RecordT]):
    """A fake answering model calls from a script (`set_script`), recording every request.
    A subclass names its `Rule`, its default answer, its handler and its label."""

    rule_type: ClassVar[type[ScriptRule[Any]]]
    default_answer: ClassVar[str]
    handler_type: ClassVar[type[FakeHandler]]
    label: ClassVar[str]

    def __init__(self, *rules: RuleT, default: Any = None, max_lifetime: float = 15 * 60) -> None:
        script = self._make_script(rules, default)
        super().__init__(self.handler_type, script, max_lifetime, self.label)

    def _make_script(self, rules: Sequence[RuleT], default: Any) -> Script[RuleT]:
        rule: Any
        if default is None:
            rule = self.rule_type("", [self.default_answer], name="default")
        elif isinstance(default, self.rule_type):
            rule = default
        elif isinstance(default, list | tuple):
            rule = self.rule_type("", default, name="default")
        else:
            rule = self.rule_type("", [default], name="default")
        return Script(tuple(rules), rule)

    def set_script(self, *rules: RuleT, default: Any = None) -> None:
        """Replace the whole script (thread-safe; requests in flight keep their old step).
        `default`: a `Rule`, a list of steps or one step (None: the fake's default answer)."""
        script = self._make_script(rules, default)
        with self._lock:
            self._script = script

    @property
    def requests(self) -> list[RecordT]:
        """Every request, in arrival order."""
        with self._lock:
            return list(self._requests)

    def _wait_for(
        self, n: int, timeout: float, match: Callable[[RecordT], bool], what: str
    ) -> list[RecordT]:
        """Block until `n` requests that `match` arrived; return them."""

        def matching() -> list[RecordT]:
            return [r for r in self._requests if match(r)]

        with self._lock:
            if not self._lock.wait_for(lambda: len(matching()) >= n, timeout):
                seen = [self._describe(r) for r in self._requests]
                raise TimeoutError(f"expected {n} {what} within {timeout}s: {seen}")
            return matching()

    def _describe(self, request: RecordT) -> str:
        return f"{request.method} {request.path}"

    # -- called by handler threads

    def _current_script(self) -> Script[RuleT]:
        return cast(Script[RuleT], super()._current_script())


def scripted_step(handler: FakeHandler, base: RecordedBase, **record: Any) -> Any:
    """The step of the handler's script that answers the model call `base`, recorded with its
    rule (and `record`)."""
    fake = cast(ScriptedFake[Any, RecordedBase], handler.server.fake)
    human_text, k = base.locate()
    rule = fake._current_script().pick(human_text)
    fake._record(replace(base, rule=rule.label, step=k, **record))
    return rule.step(k)


def answer_failure(
    handler: FakeHandler, step: AnswerStep, headers: Mapping[str, str] | None = None
) -> bool:
    """Answer a step that fails the call: drop the connection (raises `Abort`), or send its
    HTTP error (with `headers`, default the error's own). False: the step has an answer."""
    if step.drop_connection:
        raise Abort
    error: HttpErrorLike | None = step.error
    if error is None:
        return False
    handler._send_json(error.status, error.body, error.headers if headers is None else headers)
    return True
