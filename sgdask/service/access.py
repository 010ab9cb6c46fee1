"""Who may upload where, and what an upload's fields may hold (HTTP and inbox alike)."""

from __future__ import annotations

from dataclasses import dataclass

from sgdask.errors import Choose
from sgdask.report.page import SAFE_SCHEMES, url_scheme
from sgdask.service.tokens import Account

BOARDS = ("public", "approved")
NAME_MAX = 200
PAPER_MAX = 2000


@dataclass(frozen=True)
class Refusal(Exception):
    """An upload refused: the HTTP status to answer and a one-line reason."""

    status: int
    message: str

    def __str__(self) -> str:
        return self.message


def authorize(account: Account | None, token_given: bool, board: str,
              open_uploads: bool) -> None:
    """Raise Refusal unless ``account`` may upload to ``board``.

    The approved board takes maintainers only; the public board any valid token, or no
    token at all with ``open_uploads``. An unknown token is refused even then."""
    if board not in BOARDS:
        raise Refusal(400, f"board: {board!r} is not a board "
                      f"{Choose(board, BOARDS).render('http')}")
    if token_given and account is None:
        raise Refusal(401, "token: unknown or revoked token")
    if account is None:
        if board == "public" and open_uploads:
            return
        raise Refusal(401, "token: missing (send Authorization: Bearer TOKEN)")
    if board == "approved" and not account.is_maintainer:
        raise Refusal(403, f"board: team {account.team} may not upload to the approved board "
                      "(maintainers only)")


def checked_fields(fields: dict[str, str]) -> None:
    """Check the name and paper fields that came before the file, so that a bad one is
    refused before the upload is streamed (a field after the file is checked after it)."""
    if "name" in fields:
        checked_name(fields["name"])
    if "paper" in fields:
        checked_paper(fields["paper"])


def checked_name(name: str | None) -> str:
    """The model name: 1-200 printable characters (any text: it is escaped when shown)."""
    name = (name or "").strip()
    if not name:
        raise Refusal(400, "name: missing")
    if len(name) > NAME_MAX or not name.isprintable():
        raise Refusal(400, f"name: expected at most {NAME_MAX} printable characters")
    return name


def checked_paper(paper: str | None) -> str | None:
    """The paper link: empty, or an absolute http(s) URL."""
    return checked_link(paper, "paper")


DESCRIPTION_MAX = 2000


def checked_link(value: str | None, field: str) -> str | None:
    """A link field (``paper``, ``code``): empty, or an absolute http(s) URL."""
    value = (value or "").strip()
    if not value:
        return None
    if (len(value) > PAPER_MAX or not value.isprintable()
            or url_scheme(value) not in SAFE_SCHEMES):
        raise Refusal(400, f"{field}: expected an http:// or https:// link")
    return value


def checked_text(value: str | None, field: str, limit: int) -> str | None:
    """An optional free text field (``method``, ``description``): at most ``limit``
    characters, printable but for line breaks."""
    value = (value or "").strip()
    if not value:
        return None
    if len(value) > limit or not value.replace("\n", " ").replace("\r", "").isprintable():
        raise Refusal(400, f"{field}: expected at most {limit} printable characters")
    return value


def checked_flag(value: str | None, field: str) -> bool | None:
    """A yes/no field (``external_data``): yes, no or empty (not said)."""
    value = (value or "").strip().lower()
    if value in ("", "yes", "no"):
        return None if not value else value == "yes"
    raise Refusal(400, f"{field}: expected yes or no")
