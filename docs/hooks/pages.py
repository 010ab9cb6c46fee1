"""MkDocs hook: the pages the documentation generates from the repository at build time.

Nothing here is copied text, so the site cannot drift from what it documents:

- **mirrored files**: ``schemas/`` (every file format) and the cluster recipes of ``jobs/``
  become pages; Markdown files as they are (their relative links rewritten to the pages of
  the files they name), other files (JSON schemas, YAML, Dockerfile) as a highlighted code
  page, plus the raw file for download.
- **the command line**: every command's ``--help``, from the CLI's own click command.
- **the API reference**: one page per module of ``API_MODULES``, rendered by mkdocstrings
  from the docstrings.
- **included files**: ``<!-- generated: file PATH -->`` on a line of its own is replaced by
  the repository's Markdown file ``PATH``, its headings moved below the page's own (the
  performance page shows ``benchmarks/results/latest.md``, which ``make bench`` writes; the
  changelog page is ``CHANGELOG.md``).
- **links**: every page's relative links are written between the repository's files, so
  they work when a file is read as Markdown (``docs/`` linking ``../schemas/store.md``,
  ``../jobs/README.md``, ``../sgdask/report/__init__.py``; ``CHANGELOG.md`` and
  ``schemas/`` linking ``docs/...``); the build points each at the page of the file it names.

Formulas (``\\( ... \\)`` and ``\\[ ... \\]``, marked by pymdownx.arithmatex) become MathML when
the page is built, so the site shows them without JavaScript or network (it is meant to be
opened from disk).

A nav entry naming a group's index page (``formats/index.md``, ``tasks/cluster.md``,
``reference/api.md``) becomes a section holding the group's pages, so adding a schema file,
a recipe or a module needs no edit of ``mkdocs.yml``.
"""

from __future__ import annotations

import html
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[2]

#: modules of the API reference, one page each, with mkdocstrings options per module: the
#: one place the list is kept (packages that only hold submodules show them)
API_MODULES: dict[str, dict[str, Any]] = {
    "sgdask.pipeline": {},
    "sgdask.report": {},
    "sgdask.evaluator": {},
    "sgdask.core": {"show_submodules": True},
    "sgdask.formats.psg": {},
    "sgdask.formats.vg150": {},
    "sgdask.formats.oiv6": {},
    "sgdask.formats.sgbench": {},
    "sgdask.formats.results": {},
    "sgdask.formats.ingest": {},
    "sgdask.batch": {"show_submodules": True},
    "sgdask.kernels": {},
    "sgdask.errors": {},
}

CLI_MARKER = "<!-- generated: command help -->"
FILE_MARKER = re.compile(r"^<!-- generated: file (?P<path>\S+) -->$", re.M)
CODE_LANGUAGES = {".json": "json", ".yaml": "yaml", ".yml": "yaml", "Dockerfile": "dockerfile"}


@dataclass(frozen=True)
class Mirror:
    """Files of the repository shown as pages: ``source`` (a file or a directory's files,
    relative to the repository) -> pages under ``page_dir``; ``index`` is the page of
    ``README.md`` (the group's nav entry)."""

    source: str
    page_dir: str
    index: str

    def sources(self) -> list[Path]:
        root = REPO / self.source
        return sorted(p for p in root.iterdir() if p.is_file()) if root.is_dir() else [root]

    def page_of(self, path: Path) -> str:
        """The docs path of a mirrored file's page."""
        if path.name == "README.md":
            return self.index
        name = path.name if path.suffix == ".md" else f"{path.name}.md"
        return posixpath.join(self.page_dir, name)


MIRRORS = (
    Mirror("schemas", "formats", "formats/index.md"),
    Mirror("jobs/README.md", "tasks", "tasks/cluster.md"),
    Mirror("jobs/cluster", "tasks/cluster", "tasks/cluster.md"),
)


def mirrored_pages() -> dict[Path, str]:
    """Every mirrored repository file -> its page."""
    return {path: mirror.page_of(path) for mirror in MIRRORS for path in mirror.sources()}


def api_pages() -> dict[str, str]:
    """Module -> its API reference page."""
    return {module: f"reference/api/{module}.md" for module in API_MODULES}


LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def site_pages() -> dict[Path, str]:
    """Every repository file that has a page on the site -> that page: the mirrored files,
    the modules of the API reference (their source files) and ``docs/`` itself."""
    pages = mirrored_pages()
    for module, page in api_pages().items():
        source = REPO.joinpath(*module.split("."))
        pages[source / "__init__.py" if source.is_dir() else source.with_suffix(".py")] = page
    docs = REPO / "docs"
    pages.update({path: path.relative_to(docs).as_posix() for path in docs.rglob("*.md")})
    return pages


def rewrite_links(text: str, source: Path, page: str, pages: dict[Path, str]) -> str:
    """Relative links of a repository Markdown file shown as ``page``, written as links
    between the repository's files (so they work when the file is read as Markdown),
    pointed at the pages of the files they name; links to anything else are left for
    MkDocs' strict link check."""
    def rewrite(match: re.Match[str]) -> str:
        target = match["target"]
        if "://" in target or target.startswith(("/", "mailto:")):
            return match[0]
        resolved = Path(posixpath.normpath(source.parent / target))  # symlinks kept
        if resolved not in pages:
            return match[0]
        relative = posixpath.relpath(pages[resolved], posixpath.dirname(page))
        return f"]({relative}{match['anchor'] or ''})"

    return LINK.sub(rewrite, text)


def code_page(path: Path, page: str) -> str:
    """A non-Markdown file as a page: its name, a link to the raw file, its text."""
    language = CODE_LANGUAGES.get(path.suffix) or CODE_LANGUAGES.get(path.name, "text")
    raw = posixpath.basename(raw_copy(page))
    source = path.relative_to(REPO).as_posix()
    return (f"# {path.name}\n\n`{source}` in the repository ([raw file]({raw})).\n\n"
            f"```{language}\n{path.read_text().rstrip()}\n```\n")


def raw_copy(page: str) -> str:
    """Where the raw file of a code page is published (the page's path without ``.md``)."""
    return page[: -len(".md")]


def mirrored_content(path: Path, page: str, pages: dict[Path, str]) -> str:
    if path.suffix == ".md":
        return rewrite_links(path.read_text(), path, page, pages)
    return code_page(path, page)


def api_page(module: str) -> str:
    options = API_MODULES[module]
    lines = [f"# `{module}`", "", f"::: {module}"]
    if options:
        lines += ["    options:", *(f"      {k}: {str(v).lower()}" for k, v in options.items())]
    return "\n".join(lines) + "\n"


def command_help() -> str:
    """Markdown: every ``sgdask`` command's help, as ``sgdask COMMAND --help`` prints it
    (plain text, 80 columns), from the click command typer builds."""
    import typer

    from sgdask.cli import app

    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="sgdask", max_content_width=80,
                               terminal_width=80)
    return "\n".join(group_help("sgdask", group, root))


def group_help(title: str, group: Any, context: Any) -> list[str]:
    """The help sections of a command group and, in order, of every command under it
    (``sgdask tokens add`` too)."""
    sections = [help_section(title, group, context)]
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        inner = command.context_class(command, info_name=name, parent=context)
        if hasattr(command, "list_commands"):
            sections += group_help(f"{title} {name}", command, inner)
        else:
            sections.append(help_section(f"{title} {name}", command, inner))
    return sections


def help_section(title: str, command: Any, context: Any) -> str:
    """One command's plain help (rich panels off) under a heading."""
    command.rich_markup_mode = None  # typer: plain click help (this object is ours alone)
    text = command.get_help(context).rstrip()
    return f"## `{title}`\n\n```text\n{text}\n```\n"


def included_file(path: str, top: int) -> str:
    """A repository Markdown file as part of a page: its headings moved so the highest
    becomes level ``top``. A missing file fails the build."""
    source = REPO / path
    if not source.is_file():
        raise FileNotFoundError(f"{path}: named by a generated-file marker, not in the repository")
    return demoted_headings(source.read_text(), top)


def with_included_files(markdown: str, page: str) -> str:
    """``markdown`` with every generated-file marker replaced by its file, headings one
    level below the page's last heading before the marker (level 1 when there is none),
    links pointed at the pages of the files they name."""
    def include(match: re.Match[str]) -> str:
        above = [len(h["hashes"]) for h in PAGE_HEADING.finditer(markdown, 0, match.start())]
        text = included_file(match["path"], min(6, above[-1] + 1) if above else 1)
        return rewrite_links(text, REPO / match["path"], page, site_pages())

    return FILE_MARKER.sub(include, markdown)


HEADING = re.compile(r"^(?P<hashes>#{1,6})(?=\s)")
PAGE_HEADING = re.compile(r"^(?P<hashes>#{1,6})\s", re.M)


def demoted_headings(text: str, top: int) -> str:
    """``text`` with its ATX headings (outside fenced code) shifted so that the highest is
    level ``top`` (at most 6)."""
    lines = text.splitlines()
    fenced, outside = False, []
    for n, line in enumerate(lines):
        if line.startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and HEADING.match(line):
            outside.append(n)
    if not outside:
        return text
    shift = top - min(len(HEADING.match(lines[n])["hashes"]) for n in outside)
    for n in outside:
        level = min(6, len(HEADING.match(lines[n])["hashes"]) + shift)
        lines[n] = "#" * level + HEADING.sub("", lines[n])
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def group_sections() -> dict[str, list[tuple[str, str]]]:
    """Index page of each generated group -> (nav title, page) of its section, index first:
    mirrored files are titled by their file names, API pages by their modules."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for mirror in MIRRORS:
        section = groups.setdefault(mirror.index, [("Overview", mirror.index)])
        section += [(p.name, mirror.page_of(p)) for p in mirror.sources()
                    if mirror.page_of(p) != mirror.index]
    groups["reference/api.md"] = [("Overview", "reference/api.md"),
                                  *((m, page) for m, page in api_pages().items())]
    return groups


def expanded_nav(nav: list[Any], groups: dict[str, list[tuple[str, str]]]) -> list[Any]:
    """``nav`` with every entry naming a group's index page turned into the group's
    section."""
    out: list[Any] = []
    for entry in nav:
        (title, value), = entry.items() if isinstance(entry, dict) else ((None, entry),)
        if isinstance(value, list):
            value = expanded_nav(value, groups)
        elif value in groups:
            value = [{name: page} for name, page in groups[value]]
        out.append(value if title is None else {title: value})
    return out


MATH = re.compile(r'<(?P<tag>span|div) class="arithmatex">(?P<tex>.*?)</(?P=tag)>', re.S)


def mathml(match: re.Match[str]) -> str:
    """One formula marked by arithmatex (generic mode: ``\\(...\\)`` inline, ``\\[...\\]``
    displayed) as MathML."""
    from latex2mathml.converter import convert

    display = match["tag"] == "div"
    tex = html.unescape(match["tex"]).strip()[2:-2]
    formula = convert(tex, display="block" if display else "inline")
    return f'<div class="formula">{formula}</div>' if display else formula


def on_config(config: Any) -> Any:
    config["nav"] = expanded_nav(config["nav"], group_sections())
    return config


def on_files(files: Files, config: Any) -> Files:
    pages = site_pages()
    for path, page in mirrored_pages().items():
        files.append(File.generated(config, page, content=mirrored_content(path, page, pages)))
        if path.suffix != ".md":
            files.append(File.generated(config, raw_copy(page), abs_src_path=str(path)))
    for module, page in api_pages().items():
        files.append(File.generated(config, page, content=api_page(module)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, command_help())
    where = page.file.src_uri if page is not None else "index.md"  # None: a page at the root
    if page is not None and not page.file.generated_by:  # a page of docs/: links as written
        markdown = rewrite_links(markdown, REPO / "docs" / where, where, site_pages())
    return with_included_files(markdown, where)


def on_page_content(content: str, page: Any, config: Any, files: Files) -> str:
    return MATH.sub(mathml, content)
