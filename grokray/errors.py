"""User-facing errors: one line, naming the field, the bad value and what is allowed."""


class SpecError(ValueError):
    """A mistake in a spec or its overrides. The CLI prints it as one line, without a traceback."""

    def __init__(self, field: str, message: str):
        self.field = field
        text = f"{field}: {message}" if field else message
        super().__init__(" ".join(text.splitlines()) or text)  # one line even when a bad key holds a newline
