"""``sgdask submit --server URL``: upload through the JSON API, optionally wait until the
submission is ranked.

httpx sends the file from disk in chunks (multipart fields first, then the file), so a large
ZIP is never read whole into memory. Before that, ``GET /api/whoami`` checks the token, the
board and the file's size against the server's limit, so a refused upload is known before a
byte of the file is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from sgdask.errors import Option, SgdaskError
from sgdask.service.queue import FINAL

POLL_SECONDS = 2.0


def api_error(server: str, response: httpx.Response) -> SgdaskError:
    """The server's refusal as one line; a request sent without a token that needed one
    says how to give it (not the API's header)."""
    if response.status_code == 401 and "Authorization" not in response.request.headers:
        return SgdaskError(f"{server}: HTTP 401: token: missing (give ", Option("token"),
                           " or set $SGDASK_TOKEN)")
    try:
        body = response.json()
        detail = body.get("detail", response.text)
    except ValueError:
        body, detail = {}, response.text.strip()[:200]
    if response.status_code == 429 and body.get("next_allowed_at"):
        detail = f"{detail} (next upload allowed at {body['next_allowed_at']})"
    return SgdaskError(f"{server}: HTTP {response.status_code}: {detail}")


def upload(server: str, token: str | None, path: str, name: str, paper: str | None = None,
           board: str = "public", timeout: float = 600.0) -> dict[str, Any]:
    """Check the token and the size, then POST the file; returns the 202 answer (id,
    status, url)."""
    file = Path(path)
    if not file.is_file():
        raise SgdaskError(f"{path}: file not found")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    fields = {"name": name, "board": board, **({"paper": paper} if paper else {})}
    try:
        with httpx.Client(base_url=server.rstrip("/"), timeout=httpx.Timeout(
                timeout, connect=10)) as client:
            _check_before_sending(server, client, headers, file, board)
            with file.open("rb") as f:
                response = client.post(
                    "/api/submissions", data=fields, headers=headers,
                    files={"file": (file.name, f, "application/octet-stream")})
    except httpx.HTTPError as err:
        raise SgdaskError(f"{server}: cannot upload ({type(err).__name__}: {err})") from None
    if response.status_code != 202:
        raise api_error(server, response)
    return response.json()


def _check_before_sending(server: str, client: httpx.Client, headers: dict[str, str],
                         file: Path, board: str) -> None:
    """Raise SgdaskError when the server would refuse the upload for its token, board or
    size (a server without ``/api/whoami`` is not asked)."""
    answer = client.get("/api/whoami", headers=headers)
    if answer.status_code == 404:
        return
    if answer.status_code != 200:
        raise api_error(server, answer)
    who = answer.json()
    if board == "approved" and who.get("role") != "maintainer":
        raise SgdaskError(f"{server}: board: the approved board takes uploads from "
                          "maintainers only")
    size, most = file.stat().st_size, who.get("max_upload_bytes")
    if isinstance(most, int) and size > most:
        raise SgdaskError(f"{file}: {size} bytes, larger than the server's upload limit of "
                          f"{most / 2**20:g} MiB")


def wait(server: str, token: str | None, submission_id: str, timeout: float,
         progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Poll the submission until it is ranked, rejected or failed (or ``timeout`` s)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + timeout
    reported = 0
    with httpx.Client(base_url=server.rstrip("/"), timeout=30) as client:
        while True:
            try:
                response = client.get(f"/api/submissions/{submission_id}", headers=headers)
            except httpx.HTTPError as err:
                raise SgdaskError(f"{server}: cannot read the status ({err})") from None
            if response.status_code != 200:
                raise api_error(server, response)
            doc = response.json()
            for step in doc["steps"][reported:]:  # every step since the last poll, in order
                progress(step)
            reported = max(reported, len(doc["steps"]))
            seen = doc["status"]
            if seen in FINAL:
                return doc
            if time.monotonic() > deadline:
                raise SgdaskError(f"{server}: {submission_id} still {seen} after {timeout:g} s "
                                  "(the server keeps working on it)")
            time.sleep(POLL_SECONDS)


def ranked(server: str, token: str | None, submission_id: str, timeout: float,
           log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Wait until the submission is final (as ``wait``); its status document when it is
    ranked. Every step it goes through and every error line it carries go to ``log``; a
    submission rejected or failed raises SgdaskError."""
    doc = wait(server, token, submission_id, timeout,
               lambda status: log(f"{submission_id}: {status}"))
    for line in doc.get("errors", []):
        log(line)
    if doc["status"] != "ranked":
        raise SgdaskError(f"{submission_id}: {doc['status']}")
    return doc
