"""Issue 12, item 5: the S3 server stops in the middle of the work, on a real moto server.

The server is stopped by a deterministic hook, never by a timer: during ``evaluate`` by a
scheduler plugin when the first partition task has finished (the LocalCluster's scheduler
runs in this process; root tasks are queued on it, so the partitions not yet started only
start after the stop), during ``convert`` by its progress callback once the first part is
written. The retries are kept small through the storage options (botocore's
``retries.max_attempts``; s3fs's own loop, for dropped connections, is bounded by its class)
so each test takes seconds. Expected: one line naming
the URL, exit 2, no ``--out`` written, and no store left that a reader would take for one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import s3fs
from distributed.diagnostics.plugin import SchedulerPlugin

from sgdask.errors import SgdaskError
from sgdask.formats.sgbench import convert_submission
from sgdask.store.store import StoreReader
from tests.helpers import AWS_ENV, run_main

pytestmark = pytest.mark.slow

#: storage options that keep a dead endpoint's retries short (botocore: one retry, a
#: 2 s connect timeout; s3fs's own loop, for dropped connections, is bounded by its class)
FAST_RETRIES = {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2}}


class Moto:
    """A moto S3 server thread on 127.0.0.1 that a test may stop once."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{self.server.get_host_and_port()[1]}"
        self.stopped = threading.Event()
        self.lock = threading.Lock()

    @property
    def options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint, "key": "testing", "secret": "testing",
                **FAST_RETRIES}

    def cli_options(self) -> list[str]:
        return ["-S", f"endpoint_url={self.endpoint}", "-S", "key=testing", "-S",
                "secret=testing", "-S", "config_kwargs.retries.max_attempts=1", "-S",
                "config_kwargs.connect_timeout=2"]

    def stop(self) -> None:
        with self.lock:
            if not self.stopped.is_set():
                self.server.stop()
                self.stopped.set()


@pytest.fixture
def moto(monkeypatch) -> Iterator[Moto]:
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = Moto()
    try:
        yield server
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()


def upload(moto: Moto, bucket: str, stores) -> tuple[str, str]:
    fs = s3fs.S3FileSystem(**moto.options)
    fs.mkdir(bucket)
    fs.put(stores.gt, f"{bucket}/gt", recursive=True)
    fs.put(stores.pred, f"{bucket}/pred", recursive=True)
    return f"s3://{bucket}/gt", f"s3://{bucket}/pred"


class StopAfterFirstPartition(SchedulerPlugin):
    """Stops the S3 server, inside the scheduler's event loop (so no queued task is sent to
    a worker meanwhile), when the first partition task's result is in memory."""

    name = "stop-s3-after-first-partition"

    def __init__(self, moto: Moto) -> None:
        self.moto = moto
        self.finished: list[str] = []

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any
                   ) -> None:
        if finish == "memory" and "score_partition" in str(key) and not self.finished:
            self.finished.append(str(key))
            self.moto.stop()


def one_line(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("sgdask:")]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("sgdask: error: "), err
    assert "unexpected" not in err and "internal error" not in err and "Traceback" not in err
    return lines[0]


def test_s3_stopped_in_the_middle_of_evaluate(moto, stores, client, tmp_path, capsys):
    """Several partitions on the LocalCluster; the server stops after the first one is
    scored: one line naming an object of one of the two stores, exit 2, no --out."""
    gt, pred = upload(moto, "evaluate-fault", stores)
    plugin = StopAfterFirstPartition(moto)
    scheduler = client.cluster.scheduler
    scheduler.add_plugin(plugin)
    out = tmp_path / "out"
    try:
        code, _, err = run_main(capsys, "evaluate", "--gt", gt, "--pred", pred, *moto.cli_options(),
                            "--partition-size", "4", "--scheduler", client.scheduler.address,
                            "--out", str(out))
    finally:
        scheduler.remove_plugin(name=plugin.name)
    assert plugin.finished and moto.stopped.is_set()  # stopped in the middle, not before
    line = one_line(code, err)
    # an object a task read (or, for a worker whose first request came after the stop, the
    # store it opened)
    assert line.startswith((f"sgdask: error: {gt}", f"sgdask: error: {pred}")), line
    assert "cannot read" in line or "cannot access the object store" in line, line
    assert not out.exists()


def test_s3_stopped_in_the_middle_of_convert(moto, dataset, stores, client, tmp_path, capsys):
    """The server stops once the first part is written: the API raises one line naming the
    file it could not write and saying that the unfinished store (which it cannot remove
    either) is refused by readers; and it is: evaluate and verify call it not a complete
    store instead of reading it."""
    fs = s3fs.S3FileSystem(**moto.options)
    fs.mkdir("convert-fault")
    fs.put(stores.gt, "convert-fault/gt", recursive=True)
    gt_url, out = "s3://convert-fault/gt", "s3://convert-fault/pred"
    written: list[int] = []

    def stop_after_first_part(n_images: int) -> None:
        written.append(n_images)
        moto.stop()

    with pytest.raises(SgdaskError) as err:
        convert_submission(str(dataset.submission_zip), out, storage_options=moto.options,
                           partition_size=8, progress=stop_after_first_part)
    message = str(err.value)
    assert written == [8]  # one part written, then the server stopped
    assert message.startswith(f"{out}/") and "cannot write" in message, message
    assert f"{out}: the unfinished store could not be removed" in message, message
    assert "\n" not in message
    # the objects stay in moto's memory: a new server on the same process serves them
    s3fs.S3FileSystem.clear_instance_cache()
    again = Moto()
    try:
        fs = s3fs.S3FileSystem(**again.options)
        left = fs.find("convert-fault/pred")
        assert not any(p.endswith("/manifest.json") for p in left), left
        with pytest.raises(SgdaskError, match="not a complete sgdask store"):
            StoreReader(out, again.options)
        code, text, _ = run_main(capsys, "verify", out, *again.cli_options())
        assert code == 2 and f"{out}: not a complete sgdask store" in text, text
        code, _, err = run_main(capsys, "evaluate", "--gt", gt_url, "--pred", out,
                               *again.cli_options(), "--out", str(tmp_path / "o"))
        assert f"{out}: not a complete sgdask store" in one_line(code, err)
        assert not (tmp_path / "o").exists()
    finally:
        again.stop()
