"""The one exception users see: a clear, one-line message naming file, image and field."""

from __future__ import annotations


class SgdaskError(Exception):
    """A problem a user can act on. ``str(err)`` is the whole user-facing message."""


class InputError(SgdaskError):
    """Malformed input: says which file, which image, which field, and what was expected."""

    def __init__(
        self,
        file: str,
        what: str,
        *,
        image: object | None = None,
        field: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.file, self.image, self.field, self.what, self.expected = (
            file,
            image,
            field,
            what,
            expected,
        )
        parts = [str(file)]
        if image is not None:
            parts.append(f"image {image}")
        if field is not None:
            parts.append(field)
        message = ": ".join([*parts, what])
        if expected is not None:
            message += f" (expected {expected})"
        super().__init__(message)

    def __reduce__(self) -> tuple:
        """Picklable with its keyword fields, so errors raised on Dask workers arrive whole."""
        return (_rebuild_input_error, (self.file, self.what, self.image, self.field,
                                       self.expected))


def _rebuild_input_error(file: str, what: str, image: object, field: str | None,
                         expected: str | None) -> InputError:
    return InputError(file, what, image=image, field=field, expected=expected)


class InstanceMismatch(ValueError):
    """Raised by a kernel when a prediction and its GT share no instance representation
    (masks or boxes): the one kernel failure caused by the inputs rather than by a bug."""


class SgdaskWarning(UserWarning):
    """Something a user should know that does not stop the command (the CLI prints it as
    one ``sgdask: warning: ...`` line)."""


class StoreError(SgdaskError):
    """A canonical store is missing, incomplete, of the wrong kind or would be overwritten."""
