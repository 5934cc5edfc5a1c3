"""The shell commands README.md and docs/user-guide.md show, checked without a cluster.

A newcomer copies these blocks first, so a renamed sample, a dropped make target or a
hack script that lost its executable bit must fail here rather than in their terminal.
For every command in a ```sh block: `make X` targets have a rule in the Makefile; a
`tuneop` command parses with the client's own parser; the
paths it names under manifests/, charts/ and hack/ exist (hack scripts executable); the
files and heredocs given to `kubectl apply -f` parse as YAML objects with apiVersion and
kind. A command none of this applies to must be listed in UNCHECKABLE with the reason,
so a new command is either checkable or consciously listed.

The relative links of README.md and every page under docs/ are checked too: each
`](path)` names a file or folder that exists, and a `#anchor` into a Markdown page
names one of its headings (GitHub's anchors), so moving a page or renaming a section
fails here rather than in a reader's browser.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/user-guide.md")
REPO_DIRS = ("manifests/", "charts/", "hack/")
YAML_SUFFIXES = (".yaml", ".yml", ".json")  # what `kubectl apply -f DIR` reads
SEPARATORS = {"&&", "||", ";", "|", "&"}
HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")

# Commands that name nothing checkable here, keyed by their words joined by one space.
UNCHECKABLE: dict[str, str] = {
    "kubectl get tj -w": "reads the cluster's TuningJobs",
    "kubectl get tj -o wide": "reads the cluster's TuningJobs",
    "kubectl describe tj emg-cnn": "reads a job on the cluster",
    "kubectl get tj emg-cnn -o jsonpath={.status.topTrials}": "reads a job's status",
    "kubectl create configmap my-search --from-file=search.py": "search.py is the user's own",
    "kubectl get tj my-search -w": "reads a job on the cluster",
    "REGISTRY=registry.example.com/ml": "the user's registry (tests/e2e/test_readme_quickstart.py)",
    "pip install ./contract ./client": "installs the client (tests/unit/test_client_package.py)",
}


@dataclass(frozen=True)
class Command:
    """One simple command of a doc's sh block: its words, and the heredoc it reads."""

    line: int  # in the doc, for the failure message
    words: tuple[str, ...]
    stdin: str | None = None

    @property
    def key(self) -> str:
        return " ".join(self.words)


def sh_blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number of the block's first line, its lines) for each ```sh block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            yield i + 2, lines[i + 1 : end]
            i = end
        i += 1


def without_comment(line: str) -> str:
    """The line up to an unquoted `#` that starts a word, as bash reads it."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def logical_lines(first: int, lines: list[str]) -> Iterator[tuple[int, str, str | None]]:
    """(line number, command text, heredoc body) with backslash continuations joined.
    A backslash inside a comment continues nothing, as in bash."""
    i = 0
    while i < len(lines):
        start, text = first + i, without_comment(lines[i])
        while text.rstrip().endswith("\\"):
            i += 1
            text = text.rstrip()[:-1] + " " + without_comment(lines[i])
        body = None
        if marker := HEREDOC.search(text):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == marker[2])
            body, i = "\n".join(lines[i + 1 : end]), end
        yield start, text, body
        i += 1


def split_commands(line: int, text: str, body: str | None) -> list[Command]:
    """The simple commands of one logical line (comments already cut), redirections
    dropped, quotes removed as the shell would."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""  # without_comment cut them; shlex would also cut `a#b`
    out: list[Command] = []
    words: list[str] = []
    reads_heredoc = False
    tokens = iter(lexer)
    for token in tokens:
        if token in SEPARATORS:
            out.append(Command(line, tuple(words), body if reads_heredoc else None))
            words, reads_heredoc = [], False
        elif set(token) <= set("<>"):
            reads_heredoc = reads_heredoc or token.startswith("<<")
            next(tokens, None)  # the redirection's target or heredoc delimiter
        else:
            words.append(token)
    out.append(Command(line, tuple(words), body if reads_heredoc else None))
    return [command for command in out if command.words]


def commands(text: str) -> list[Command]:
    return [
        command
        for first, lines in sh_blocks(text)
        for line, logical, body in logical_lines(first, lines)
        for command in split_commands(line, logical, body)
    ]


def program(words: tuple[str, ...]) -> tuple[str, ...]:
    """The words after any leading VAR=value assignments."""
    i = 0
    while i < len(words) and re.fullmatch(r"[A-Za-z_]\w*=.*", words[i]):
        i += 1
    return words[i:]


def make_problems(words: tuple[str, ...], root: Path) -> list[str]:
    makefile = (root / "Makefile").read_text()
    targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return [
        f"make target {target!r} has no rule in the Makefile"
        for target in targets
        if not re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE)
    ]


def repo_paths(words: tuple[str, ...]) -> list[str]:
    """Paths under the repository's shipped folders, also as --opt=PATH or VAR=PATH."""
    candidates = [part for word in words for part in {word, word.rpartition("=")[2]}]
    paths = [c.removeprefix("./") for c in candidates]
    return sorted({p for p in paths if p.startswith(REPO_DIRS)})


def path_problems(paths: list[str], root: Path) -> list[str]:
    problems = []
    for name in paths:
        path = root / name
        if not path.exists():
            problems.append(f"{name} does not exist")
        elif name.startswith("hack/") and path.is_file() and not os.access(path, os.X_OK):
            problems.append(f"{name} is not executable")
    return problems


def apply_files(words: tuple[str, ...]) -> list[str]:
    """The -f/--filename arguments of `kubectl apply`."""
    files = []
    for i, word in enumerate(words):
        if word in ("-f", "--filename") and i + 1 < len(words):
            files.append(words[i + 1])
        elif word.startswith(("-f=", "--filename=")):
            files.append(word.partition("=")[2])
    return files


def yaml_problems(source: str, text: str) -> list[str]:
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        return [f"{source} is not YAML: {error}"]
    if not documents:
        return [f"{source} holds no object"]
    return [
        f"{source}: a document without apiVersion and kind"
        for d in documents
        if not (isinstance(d, dict) and d.get("apiVersion") and d.get("kind"))
    ]


def apply_problems(command: Command, words: tuple[str, ...], root: Path) -> list[str]:
    problems = []
    for name in apply_files(words):
        if name == "-":
            if command.stdin is None:
                problems.append("kubectl apply -f - without a heredoc")
            else:
                problems += yaml_problems("the heredoc", command.stdin)
            continue
        path = root / name
        if not path.exists():
            problems.append(f"{name} does not exist")
            continue
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        for file in (f for f in files if f.suffix in YAML_SUFFIXES):
            problems += yaml_problems(str(file.relative_to(root)), file.read_text())
    return problems


def check(command: Command, root: Path = ROOT) -> list[str] | None:
    """What is wrong with the command ([] if nothing), or None if nothing is checkable."""
    words = program(command.words)
    applies = words[:2] == ("kubectl", "apply")
    paths = repo_paths(words)
    client = words[:1] == ("tuneop",)
    if not (words[:1] == ("make",) or applies or paths or client):
        return None
    problems = make_problems(words, root) if words[:1] == ("make",) else []
    problems += client_problems(words) if client else []
    problems += apply_problems(command, words, root) if applies else []
    # apply_problems already names a missing -f file; report each path once.
    applied = set(apply_files(words))
    return problems + path_problems([p for p in paths if p not in applied], root)


def client_problems(words: tuple[str, ...]) -> list[str]:
    """A `tuneop` command the client's own parser refuses (a renamed option)."""
    from tuneop_client.cli import _parse

    try:
        _parse(list(words[1:]))
    except SystemExit:
        return ["the tuneop client refuses these arguments"]
    return []


def doc_problems(text: str, uncheckable: dict[str, str], root: Path = ROOT) -> list[str]:
    out = []
    for command in commands(text):
        result = check(command, root)
        if result is None and command.key not in uncheckable:
            out.append(f"line {command.line}: {command.key!r}: nothing to check; list it")
        out += [f"line {command.line}: {command.key!r}: {p}" for p in result or []]
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_doc_commands_check_out(doc: str) -> None:
    problems = doc_problems((ROOT / doc).read_text(), UNCHECKABLE)
    assert not problems, f"{doc}:\n" + "\n".join(problems)


def test_the_two_commands_are_found() -> None:
    readme = {command.key for command in commands((ROOT / "README.md").read_text())}
    assert {"make demo", "make test"} <= readme
    assert all(commands((ROOT / doc).read_text()) for doc in DOCS)


def test_uncheckable_entries_are_shown_and_uncheckable() -> None:
    """A stale entry would let a later command of that text slip through unchecked."""
    shown = {c.key: c for doc in DOCS for c in commands((ROOT / doc).read_text())}
    assert set(UNCHECKABLE) <= set(shown), set(UNCHECKABLE) - set(shown)
    assert [key for key in UNCHECKABLE if check(shown[key]) is not None] == []


def test_broken_references_fail(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("demo: venv ## the demo\n")
    (tmp_path / "hack").mkdir()
    (tmp_path / "hack" / "fetch.sh").write_text("#!/bin/sh\n")  # not executable
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "bad.yaml").write_text("kind: [\n")
    text = (
        "```sh\nmake demo && make tset\nhack/fetch.sh job\n"
        "kubectl apply -f manifests/bad.yaml -f manifests/renamed.yaml\n"
        "kubectl apply -f - <<'YAML'\nkind: Pod\nYAML\nkubectl get pods\n```\n"
    )
    problems = doc_problems(text, {}, root=tmp_path)
    expected = ["'tset'", "not executable", "bad.yaml is not YAML", "renamed.yaml does not"]
    expected += ["without apiVersion", "'kubectl get pods': nothing to check"]
    assert len(problems) == len(expected), problems
    for fragment, problem in zip(expected, problems, strict=True):
        assert fragment in problem, problems


def test_blocks_are_parsed_as_the_shell_would() -> None:
    text = (
        "```sh\nhelm install x charts/tuneop \\\n  --set a=b   # comment \\\n"
        "KUEUE=1 make cluster-up && export K=v  # don't\n```\n"
    )
    assert [c.words for c in commands(text)] == [
        ("helm", "install", "x", "charts/tuneop", "--set", "a=b"),
        ("KUEUE=1", "make", "cluster-up"),
        ("export", "K=v"),
    ]


# --- relative links ------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = ("http://", "https://", "mailto:")


def markdown_docs(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped,
    spaces as hyphens, a repeated heading numbered -1, -2, ..."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(text):
        if match := HEADING.match(line):
            slug = re.sub(r"[^\w\- ]", "", match[2].lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def link_problems(doc: Path) -> list[str]:
    problems = []
    for number, line in prose_lines(doc.read_text()):
        for target in LINK.findall(line):
            if target.startswith(EXTERNAL):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                problems.append(f"line {number}: {target}: {path} does not exist")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                problems.append(f"line {number}: {target}: no heading #{anchor} in {file.name}")
    return problems


@pytest.mark.parametrize("doc", [str(d.relative_to(ROOT)) for d in markdown_docs()])
def test_relative_links_resolve(doc: str) -> None:
    problems = link_problems(ROOT / doc)
    assert not problems, f"{doc}:\n" + "\n".join(problems)


def test_broken_links_fail(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "page.md").write_text("# A page — its title\n\n## Step `one` (a.py)\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Top\n[ok](sub/page.md#a-page--its-title) [ok](sub/page.md#step-one-apy) [ok](#top)"
        " [ok](https://example.com/x) [ok](sub/)\n```sh\n# not a heading [x](gone.md)\n```\n"
        "[bad](gone.md) [bad](sub/page.md#step-two) [bad](#bottom)\n"
    )
    problems = link_problems(doc)
    expected = ["gone.md does not exist", "no heading #step-two", "no heading #bottom"]
    assert len(problems) == len(expected), problems
    for fragment, problem in zip(expected, problems, strict=True):
        assert fragment in problem, problems


def fence_problems(text: str) -> list[str]:
    """Code fences that render wrong: a closing fence with text after it (CommonMark then
    keeps the block open, and everything below renders as code), or a fence left open."""
    problems, opened = [], 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped.startswith("```"):
            continue
        if not opened:
            opened = number
        elif stripped != "```":
            problems.append(f"line {number}: text after a closing fence: {stripped[:40]!r}")
        else:
            opened = 0
    if opened:
        problems.append(f"line {opened}: a code fence is never closed")
    return problems


@pytest.mark.parametrize("doc", [str(d.relative_to(ROOT)) for d in markdown_docs()])
def test_code_fences_close(doc: str) -> None:
    problems = fence_problems((ROOT / doc).read_text())
    assert not problems, f"{doc}:\n" + "\n".join(problems)


def test_a_fence_closed_with_text_fails() -> None:
    assert fence_problems("```yaml\na: 1\n```\n") == []
    assert fence_problems("```yaml\na: 1\n``` More text\n```sh\nx\n```\n")[0].startswith("line 3")
    assert fence_problems("```sh\nx\n") == ["line 1: a code fence is never closed"]


def test_a_tuneop_command_the_client_refuses_fails() -> None:
    assert client_problems(("tuneop", "status", "search")) == []
    assert client_problems(("tuneop", "statuz", "search")) != []
    assert client_problems(("tuneop", "results", "search", "--bogus")) != []
