"""User-facing errors: one line, naming the field, the bad value and what is allowed; every mistake of a spec at
once (`Mistakes`), so a spec with three typos takes one edit, not three runs."""

from __future__ import annotations

import difflib
from contextlib import contextmanager


class SpecError(ValueError):
    """A mistake in a spec or its overrides. The CLI prints it as one line, without a traceback."""

    def __init__(self, field: str, message: str):
        self.field = field
        text = f"{field}: {message}" if field else message
        super().__init__(" ".join(text.splitlines()) or text)  # one line even when a bad key holds a newline

    @property
    def errors(self) -> list[SpecError]:
        return [self]


class SpecErrors(SpecError):
    """Several independent mistakes, each its own SpecError (`errors`); `field` is the first one's."""

    def __init__(self, errors: list[SpecError]):
        self._errors = list(errors)
        super().__init__(errors[0].field, "")
        self.args = ("; ".join(str(e) for e in self._errors),)

    def __str__(self) -> str:
        return self.args[0]

    @property
    def errors(self) -> list[SpecError]:
        return self._errors


class LaunchFinished(Exception):
    """`--resume` found the spec's latest launch closed as finished: there is nothing to continue, and its record
    (times, description, figures) is left as it is. The CLI prints the message and exits 0."""

    def __init__(self, message: str, run_id: str = ""):
        super().__init__(message)
        self.run_id = run_id  # the finished parent


class RayDidNotStart(Exception):
    """A private local Ray did not come up, tried twice (a busy machine: Ray waits a fixed 30 s for its raylet).
    Nothing trained and nothing was written to the store; the CLI prints the message and exits 4."""


class AtlasStopped(Exception):
    """A stop signal ended an atlas piece before it finished: no page is written for a part of a figure, and the
    next `grokray atlas` resumes the piece. The CLI prints the message and exits 1, as a stopped launch does."""


class Mistakes:
    """Collects the SpecErrors of independent checks: `with m.check(): ...` per check, then `m.raise_any()`."""

    def __init__(self):
        self.errors: list[SpecError] = []

    @contextmanager
    def check(self):
        try:
            yield
        except SpecError as exc:
            self.errors += [e for e in exc.errors if str(e) not in {str(x) for x in self.errors}]

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise SpecErrors(self.errors)


def did_you_mean(value, allowed) -> str:
    """'did you mean 'transformer'? ' for a value close to one allowed, else ''."""
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""
