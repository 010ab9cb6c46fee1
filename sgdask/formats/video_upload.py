"""Video model outputs as one uploaded file (``sgdask serve``'s video phases).

An Action Genome model output is a pickle of ``{video: {field: array}}`` or a directory of
``VIDEO.npz``; a PVSG results directory holds ``VIDEO/quantitive/masks.txt`` and
``VIDEO/relations.json``. One upload carries either: the pickle as it is, a directory as a
ZIP. ``VideoUpload`` says, per output format (its name is the phase's ``upload``), which GT
store format scores it, whether the phase names the output's method, which files of a ZIP
are the output (``layout``: each video's key file, found at any one depth, so a ZIP of the
folder and a ZIP of its contents both work) and what the service answers to a file that
can never be one (``refusal``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from sgdask.errors import InputError
from sgdask.formats.actiongenome import GT_FORMAT as AG_GT
from sgdask.formats.actiongenome import OUTPUT_FORMAT, is_pickle
from sgdask.formats.pvsg import GT_FORMAT as PVSG_GT
from sgdask.formats.pvsg import RESULTS_FORMAT
from sgdask.io.pvsg import MASKS_FILE

#: an archive's entries that are no output file (what macOS adds to a ZIP)
_IGNORED = ("__MACOSX/",)


@dataclass(frozen=True)
class VideoUpload:
    """One video output format as an upload."""

    format: str  # the output format's name: a phase's ``upload``
    gt_format: str  # the GT store format its outputs are scored against
    dataset: str  # how messages call the dataset
    method: bool  # whether the phase names the output's method (``sttran``, ``tempura``)
    pickle: bool  # whether a pickle is taken as it is (else only a ZIP)
    key: str  # the suffix of each video's key file in a ZIP (after the video's name)
    what: str  # what an upload is, for messages

    def accepts(self, head: bytes) -> bool:
        """Whether a file starting with ``head`` may be this output (a ZIP, a pickle)."""
        return head.startswith(b"PK") or (self.pickle and is_pickle(head))

    def refusal(self, head: bytes, name: str) -> str | None:
        """Why an upload starting with ``head`` can never be this output, or None."""
        return None if self.accepts(head) else f"{name}: not {self.what}"

    def layout(self, members: list[str], shown_as: str) -> dict[str, str]:
        """The output's files in a ZIP (all under one folder): member -> path relative to
        that folder (each video's files; nothing else is copied)."""
        files = [m for m in members if not m.endswith("/") and not m.startswith(_IGNORED)]
        keys = [m for m in files if m.endswith(self.key) and len(m) > len(self.key)]
        if not keys:
            raise InputError(shown_as, f"holds no {self.key.lstrip('/')} file",
                             expected=self.what)
        videos = {m[:-len(self.key)] for m in keys}
        roots = {posixpath.dirname(v) for v in videos}
        if len(roots) > 1:
            first, second = sorted(roots)[:2]
            raise InputError(shown_as, f"holds outputs in two folders, {first or '.'!r} "
                             f"and {second!r}", expected=f"{self.what}, in one folder")
        root = roots.pop()
        prefix = root + "/" if root else ""
        wanted = {}
        for member in files:
            relative = member[len(prefix):] if member.startswith(prefix) else None
            if relative is None:
                continue
            video = relative.split("/", 1)[0]
            if prefix + video in videos or member in keys:
                wanted[member] = relative
        return wanted


VIDEO_UPLOADS = {
    OUTPUT_FORMAT: VideoUpload(
        OUTPUT_FORMAT, AG_GT, "Action Genome", True, True, ".npz",
        "an Action Genome model output (a pickle of {video: {field: array}}, or a ZIP of "
        "VIDEO.npz files)"),
    RESULTS_FORMAT: VideoUpload(
        RESULTS_FORMAT, PVSG_GT, "PVSG", False, False, "/" + MASKS_FILE,
        "a PVSG results directory as a ZIP (VIDEO/quantitive/masks.txt and "
        "VIDEO/relations.json per video)"),
}


def video_upload(upload: str) -> VideoUpload | None:
    """The video output a phase's ``upload`` names, or None (an image submission)."""
    return VIDEO_UPLOADS.get(upload)


def video_upload_of_gt(gt_format: str | None) -> VideoUpload | None:
    """The video output a GT store of ``gt_format`` scores, or None (an image GT)."""
    return next((v for v in VIDEO_UPLOADS.values() if v.gt_format == gt_format), None)
