"""The runnable blocks of README.md and docs/*.md, and how tests/test_docs_blocks.py runs each one.

Every fenced block whose language is sh, bash, shell, console or python (py) is a test case named
`file:line` (the line of its opening fence), run in a fresh sandbox directory where the files the
docs name exist (vit.gguf, photos/, cat.jpg, clip.mp4, ...: tiny stand-ins built once per session).
Blocks of other languages (json, toml, c, output without a language) are not run.

Directives: an HTML comment on the line right before the fence (invisible when rendered), several
separated by `;`:

    <!-- docs-test: skip (REASON) -->      not run: for what CI has not (a GPU, Kubernetes, a Ray
                                            cluster, a sanitizer build). The reason is required, and a
                                            test caps how many blocks may be skipped.
    <!-- docs-test: server FILE... -->     before the block, start `jepa-server -m FILE...` (files of
                                            the sandbox; a model's id is its file stem) on a free port,
                                            wait for /health, and point the block's 127.0.0.1:8080 and
                                            localhost:8080 at it; stopped after the block.
    <!-- docs-test: setup NAME -->         python: run the test module's setup NAME first, in the
                                            block's globals: the names the prose leaves to the reader
                                            (clips, pose, actions, ...), shaped for the tiny models.
    <!-- docs-test: continues -->          run the document's previous runnable block first, in the
                                            same sandbox: its outputs are this block's inputs.

An unknown directive, or a directive above a block that is not run, is an error (a typo must not
quietly change what runs).

Shell blocks run with `bash -e -o pipefail`, the venv's bin first on PATH, JEPA_PORT set to the
block's free port and JEPA_CACHE_DIR to a session directory. Rules that need no directive:

- `# ...` lines show output; bash reads them as comments. A command followed by an output line
  `# PROG: error: ...` must fail (exit non-zero): the doc shows its error.
- `make TARGET...` runs as `make -n -C <checkout> TARGET...`: the targets exist and their recipes
  expand, nothing is built (`make test` is what runs this test; recursion stays a dry run).
- `pip install REQ...` is not run (it would rebuild the package under test): each REQ must be this
  checkout (`.`, `'.[extra,...]'`) or `jepa[extra,...]` with extras pyproject.toml declares, or a
  package the test environment has installed.
- `jepa-server [FLAGS]` (serving, not `info` / `check`) starts in the background on the block's port
  (its own --host / --port replaced by 127.0.0.1 and JEPA_PORT), and the block goes on once /health
  answers 200; it runs until the block's next `jepa-server` command (`check` wants the port free, as
  before any start) or the block's end. 127.0.0.1:8080 and localhost:8080 in the block mean the
  block's port.
- `curl` runs with `--fail-with-body`: an HTTP error answer fails the block.
- `/srv/models` means the sandbox's srv/models directory.
- `python tools/NAME.py ...` runs the checkout's tool (the sandbox has no tools/).

Python blocks run in a fresh interpreter with the sandbox as cwd, compiled under the doc's file
name and line numbers, so a traceback points at the doc.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "console": "sh", "python": "python", "py": "python"}
DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
SERVER_SUBCOMMANDS = {"info", "check"}
DEFAULT_ADDRESS = re.compile(r"\b(127\.0\.0\.1|localhost):8080\b")
EXPECTED_ERROR = re.compile(r"^\s*#\s*[\w.-]+: error:")
PATH_MAP = {"/srv/models": "srv/models"}


class DirectiveError(ValueError):
    """A docs-test comment the runner does not understand."""


@dataclass(frozen=True)
class Directives:
    skip: str | None = None  # the reason
    server: tuple[str, ...] = ()
    setup: str | None = None
    continues: bool = False


@dataclass(frozen=True)
class Block:
    doc: str  # relative to the checkout: README.md, docs/serving.md
    line: int  # 1-based line of the opening fence
    lang: str  # "sh" or "python"
    code: str
    directives: Directives = field(default_factory=Directives)
    console: bool = False  # a `console` block: `$ ` lines are commands, the rest output

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def first_code_line(self) -> int:
        return self.line + 1


def _split(text: str) -> list[str]:
    """The directives of one comment: split at `;` outside parentheses (a skip reason may have one)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == ";" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def parse_directives(text: str, where: str) -> Directives:
    skip: str | None = None
    server: tuple[str, ...] = ()
    setup: str | None = None
    continues = False
    for part in filter(None, (p.strip() for p in _split(text))):
        word, _, rest = part.partition(" ")
        rest = rest.strip()
        if word == "skip":
            m = re.fullmatch(r"\((.+)\)", rest)
            if not m:
                raise DirectiveError(f"{where}: skip needs a reason: `skip (why)`, got {part!r}")
            skip = m.group(1).strip()
        elif word == "server":
            server = tuple(rest.split())
            if not server:
                raise DirectiveError(f"{where}: server needs the model files it serves")
        elif word == "setup":
            if not re.fullmatch(r"[\w-]+", rest):
                raise DirectiveError(f"{where}: setup needs one name, got {rest!r}")
            setup = rest
        elif word == "continues" and not rest:
            continues = True
        else:
            raise DirectiveError(f"{where}: unknown docs-test directive {part!r}")
    return Directives(skip=skip, server=server, setup=setup, continues=continues)


def extract(text: str, doc: str) -> list[Block]:
    """The runnable fenced blocks of one Markdown text, in order, with their directives."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        where = f"{doc}:{i + 1}"
        d = DIRECTIVE.match(lines[i - 1]) if i else None
        kind = LANGUAGES.get(lang.lower())
        if d and kind is None:
            raise DirectiveError(f"{where}: a docs-test directive above a {lang or 'plain'} block (not run)")
        if kind is not None:
            body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1 : end]]
            directives = parse_directives(d.group(1), where) if d else Directives()
            blocks.append(Block(doc, i + 1, kind, "\n".join(body) + "\n", directives, lang == "console"))
        i = end + 1
    return blocks


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def all_blocks(root: Path = ROOT) -> list[Block]:
    out: list[Block] = []
    for path in doc_files(root):
        out += extract(path.read_text(), path.relative_to(root).as_posix())
    return out


def previous(block: Block, blocks: list[Block]) -> Block:
    """The runnable block before `block` in its document (what `continues` runs first)."""
    same = [b for b in blocks if b.doc == block.doc and b.line < block.line]
    if not same:
        raise DirectiveError(f"{block.id}: `continues`, but no block comes before it")
    return same[-1]


# ---- shell blocks ----------------------------------------------------------------------------------


def _complete(text: str) -> bool:
    """Whether `text` is a whole command: no trailing backslash, pipe or `&&` / `||`, no open quote."""
    if text.endswith("\\"):
        return False
    try:
        w = shlex.split(text, comments=True)
    except ValueError:
        return False
    return not (w and w[-1] in ("|", "&&", "||"))


def commands(code: str, console: bool = False) -> list[tuple[str, list[str]]]:
    """The block as (logical line, the output comment lines right after it): a command with its
    continuation lines joined as written, or a comment / blank line with no words."""
    raw = code.rstrip("\n").split("\n")
    if console:  # `$ cmd` is a command; everything else is what it printed
        raw = [ln[2:] if ln.startswith("$ ") else ("# " + ln if ln.strip() else ln) for ln in raw]
    out: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(raw):
        text = raw[i]
        i += 1
        if text.strip() and not text.lstrip().startswith("#"):
            while not _complete(text) and i < len(raw):
                text += "\n" + raw[i]
                i += 1
        out.append((text, []))
        if text.strip() and not text.lstrip().startswith("#"):
            j = i
            while j < len(raw) and raw[j].lstrip().startswith("#"):
                out[-1][1].append(raw[j])
                j += 1
    return out


def words(text: str) -> list[str]:
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError:
        return []


def pip_problems(args: list[str], extras: set[str], installed: set[str]) -> list[str]:
    """Why a `pip install ARGS` line would not install what the doc means (empty: fine)."""
    problems = []
    for req in (a for a in args if not a.startswith("-")):
        m = re.fullmatch(r"(\.|jepa)(?:\[([\w,\s-]+)\])?", req)
        if m:
            unknown = {e.strip() for e in (m.group(2) or "").split(",") if e.strip()} - extras
            if unknown:
                problems.append(f"{req}: extra(s) {sorted(unknown)} not in pyproject.toml")
        elif re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0].lower().replace("_", "-") not in installed:
            problems.append(f"{req}: not installed in the test environment (requirements/*.txt)")
    return problems


SHELL_PRELUDE = r"""
set -e -o pipefail
DOCS_PID=
docs_stop() {
    if [ -n "$DOCS_PID" ]; then kill "$DOCS_PID" 2>/dev/null || true; wait "$DOCS_PID" 2>/dev/null || true; fi
    DOCS_PID=
}
docs_serve() {  # a serving jepa-server line: in the background on JEPA_PORT, until /health is 200
    docs_stop
    echo "docs-test: starting $* on port $JEPA_PORT" >>"$DOCS_SERVER_LOG"
    "$@" --host 127.0.0.1 --port "$JEPA_PORT" >>"$DOCS_SERVER_LOG" 2>&1 &
    DOCS_PID=$!
    for _ in $(seq 1 1200); do
        if command curl -sf -o /dev/null "http://127.0.0.1:$JEPA_PORT/health"; then return 0; fi
        if ! kill -0 "$DOCS_PID" 2>/dev/null; then
            echo "docs-test: the server exited before /health:" >&2; cat "$DOCS_SERVER_LOG" >&2
            DOCS_PID=; return 1
        fi
        sleep 0.05
    done
    echo "docs-test: no /health in 60 s" >&2; return 1
}
curl() { command curl --fail-with-body "$@"; }  # an HTTP error fails the block, body shown
trap docs_stop EXIT
"""


@dataclass
class ShellScript:
    text: str
    problems: list[str]  # what the rules found without running anything (pip lines)


def shell_script(block: Block, port: int, extras: set[str], installed: set[str]) -> ShellScript:
    """The block as the bash script the test runs (SHELL_PRELUDE first), by the rules above."""
    out = [SHELL_PRELUDE.strip("\n")]
    problems: list[str] = []
    for text, outputs in commands(block.code, block.console):
        text = DEFAULT_ADDRESS.sub(lambda m: f"{m.group(1)}:{port}", text)
        for theirs, ours in PATH_MAP.items():
            text = text.replace(theirs, ours)
        w = words(text)
        if not w:
            out.append(text)
            continue
        if w[0] == "make":
            out.append(shlex.join(["make", "-n", "-C", str(ROOT), *w[1:]]))
        elif w[0] in ("python", "python3") and len(w) > 1 and w[1].startswith("tools/"):
            out.append(shlex.join([w[0], str(ROOT / w[1]), *w[2:]]))
        elif w[:2] in (["pip", "install"], ["pip3", "install"]):
            problems += [f"{block.id}: {p}" for p in pip_problems(w[2:], extras, installed)]
            out.append(": " + shlex.quote(text))
        elif w[0] == "jepa-server" and (len(w) == 1 or w[1] not in SERVER_SUBCOMMANDS):
            out.append("docs_serve " + shlex.join(_without_address(w)))
        else:
            if w[0] == "jepa-server":
                out.append("docs_stop")
            if outputs and EXPECTED_ERROR.match(outputs[0]):
                say = shlex.quote(f"docs-test: expected to fail: {text}")
                out.append(f"if\n{text}\nthen echo {say} >&2; exit 1; fi")
            else:
                out.append(text)
    return ShellScript("\n".join(out) + "\n", problems)


def _without_address(w: list[str]) -> list[str]:
    """A jepa-server command line without its --host / --port (the runner gives its own)."""
    out: list[str] = []
    skip = False
    for a in w:
        if skip:
            skip = False
        elif a in ("--host", "--port"):
            skip = True
        elif not a.startswith(("--host=", "--port=")):
            out.append(a)
    return out


def python_source(block: Block, port: int) -> str:
    """The block's code with the default address pointing at the block's server."""
    return DEFAULT_ADDRESS.sub(lambda m: f"{m.group(1)}:{port}", block.code)


if __name__ == "__main__":  # `python tests/docs_blocks.py`: the test cases, their ids and directives
    for b in all_blocks():
        d = b.directives
        print(b.id, b.lang, *(f"{k}={v}" for k, v in vars(d).items() if v))
