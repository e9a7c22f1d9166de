"""Synthetic sites for benchmarks: N labs of realistic size, for InfraLens and for Hugo.

`generate(root, n)` writes an InfraLens site (site.yml, labs/, code/; no templates/, so the build
uses the repository's theme): lab numbers 1..n, ids `lab-0001-<slug>`, each manifest ~750 words of
prose over the same fields the real labs fill, each starter a ~115-line Python file with a
`# region core` excerpt and three key blocks bound to its lines. Identifiers, numbers and prose vary
per lab, deterministically from `seed`. `hugo_site(root, n)` writes the same content as a Hugo site:
a Markdown page per lab (the prose, the excerpt and the notes) and a page per starter (the whole
file), both highlighted by Hugo, with a minimal theme whose navigation lists the lab's track.

`edit_prose` and `edit_starter_comment` change one visible word of a lab, for rebuild benchmarks.

Run:  python bench/synthetic.py N DIR [--seed S] [--tracks T] [--hugo HUGO_DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from string import Template

NOUNS = (
    "cache", "tile", "block", "head", "token", "shard", "page", "kernel", "buffer", "tensor",
    "batch", "queue", "layer", "gradient", "activation", "replica", "bucket", "stream", "window",
    "expert", "lane", "slab", "row", "column", "slot",
)
QUALIFIERS = (
    "paged", "tiled", "fused", "sharded", "quantized", "grouped", "rotary", "chunked", "pinned",
    "lazy", "sparse", "packed", "ragged", "streamed", "blocked", "cached", "mixed", "static",
    "dynamic", "local",
)
TOPICS = (
    "attention", "decoding", "prefill", "allocation", "scheduling", "reduction", "checkpointing",
    "dispatch", "routing", "offload", "sampling", "softmax", "matmul", "normalization", "embedding",
    "pipelining", "compaction", "prefetch", "eviction", "accounting",
)
UNITS = ("bytes", "rows", "flops", "steps", "tokens", "pages", "blocks", "heads", "words", "reads")
FIELDS = (
    "num_layers", "hidden_dim", "seq_len", "batch_size", "num_heads", "block_size", "page_size",
    "dtype_bytes", "vocab_size", "num_experts", "window_size", "chunk_size", "num_ranks", "tile_size",
)
TRACK_NAMES = (
    "Foundations", "Attention", "Inference", "Training Memory", "Distributed", "Kernels",
    "Quantization", "Serving", "Data Loading", "Compilers", "Diffusion", "Networking",
)
ROLES = ("Setup / contract", "Main transition", "Interview hook", "The invariant", "Where the cost hides")

SENTENCES = (
    "Each {noun} holds {num} {unit}, and {ident} is where that count enters the ledger.",
    "The {qual} {noun} trades extra {unit} for fewer passes over the {noun2}, which is the whole point of {topic}.",
    "Read {ident} as a price per {noun}: multiply it by the number of {noun2}s in flight to get the total.",
    "When the {noun} no longer fits, the {topic} step spills to a slower tier and the {unit} count doubles.",
    "Nothing here depends on the hardware, because the counts follow from the shapes alone.",
    "A {qual} layout keeps neighbouring {unit} together, so one read serves {num} lookups instead of one.",
    "The loop visits every {noun} once, so the work grows linearly with {ident}.",
    "Changing {flag} moves only this line, which makes it a good place to start experimenting.",
    "The script asserts the closed form against the loop, so a wrong formula fails loudly instead of printing a plausible number.",
    "Think of the {noun} as a budget: {topic} spends it, and {ident} records how much is left.",
    "Doubling the {noun2} size halves the number of {noun2}s but leaves the total {unit} unchanged.",
    "Schedulers in real systems make the same choice, only with more {noun}s and stricter deadlines.",
    "The {qual} variant is not faster by magic: it moves fewer {unit} across the slowest link.",
    "At {num} {unit} per {noun}, a modest batch already dominates the memory of the {noun2}.",
    "Keep the two counts apart, since one scales with the {noun} and the other with the {noun2}.",
    "This is the line an interviewer expects you to derive on a whiteboard before any code runs.",
    "With the defaults the ratio is exactly {num} to one, which the run prints and checks.",
    "If you remember one thing, remember that {ident} grows with the {noun2} and not with the {noun}.",
    "Real {topic} code adds bookkeeping around this idea, but the arithmetic underneath is the same few lines.",
    "The *{qual}* form is the one production kernels use, and the plain form is here only to compare against.",
    "Every {noun2} is visited in order, so the result does not depend on how the {unit} are split.",
    "Profilers show the same shape: a short burst of {topic} followed by a long wait on the {noun}.",
)
MATH = (
    r"$c = {a} \cdot n \cdot d^2$",
    r"$b = 2 \cdot L \cdot h \cdot d_\text{{head}}$",
    r"$t = \lceil n / {a} \rceil \cdot k$",
    r"$\frac{{n}}{{{a}}} \cdot m$",
    r"$I = \text{{flops}} / \text{{bytes}}$",
)
MYTHS = (
    '"The {qual} {noun} is always faster." It is faster only when {unit} are the bottleneck; otherwise it adds bookkeeping for nothing.',
    '"{ident} is a measured figure." It is computed from the shapes, and the run checks it against a loop, not a stopwatch.',
    '"More {noun2}s mean more {unit}." Splitting changes how the {unit} are grouped, not how many there are.',
    '"This is how {topic} works on a GPU." The arithmetic carries over, but real kernels also fight for registers and shared memory.',
    '"The {noun} can be ignored at inference." It shrinks, but the part that grows with context stays and often dominates.',
)


@dataclass(frozen=True)
class SyntheticLab:
    """Everything one synthetic lab says, ready to write in either site's format."""

    number: int
    id: str
    title: str
    track: str
    module: str
    starter: str
    """The starter's whole text."""
    region_start: int
    """Real line number of the first line shown in the excerpt (after `# region core`)."""
    region_lines: tuple[str, ...]
    summary: str
    concept_goal: str
    mechanism: tuple[str, ...]
    role: str
    key_blocks: tuple[tuple[str, str, str], ...]
    """(name, bound text, note) for each key block."""
    checkpoints: tuple[str, ...]
    misunderstandings: tuple[str, ...]
    interview: str
    intuition: tuple[str, ...]

    @property
    def starter_path(self) -> str:
        return f"code/{self.id}/{self.module}"


def tracks_of(count: int) -> list[tuple[str, str]]:
    """Return (id, title) of each track."""
    return [(f"track-{i + 1:02d}", f"{TRACK_NAMES[i % len(TRACK_NAMES)]} {i + 1}") for i in range(count)]


def lab_id(number: int, slug: str) -> str:
    return f"lab-{number:04d}-{slug}"


def make_lab(number: int, *, tracks: int, seed: int) -> SyntheticLab:
    """Invent lab `number`: title, starter and prose, the same for the same seed."""
    rng = random.Random(f"{seed}:{number}")
    qual, noun, topic = rng.choice(QUALIFIERS), rng.choice(NOUNS), rng.choice(TOPICS)
    title = f"{qual.title()} {noun.title()} {topic.title()}"
    slug = f"{qual}-{noun}-{topic}"
    module = f"{qual}_{noun}_{topic}.py"
    track = tracks_of(tracks)[rng.randrange(tracks)][0]
    code = starter_code(rng, title, qual, noun, topic)
    idents = [f"`{name}`" for name in code.variables[:6]] + [f"`{field}`" for field in code.fields]
    flags = [f"`--{field.replace('_', '-')}`" for field in code.fields]

    def para(words: int) -> str:
        return paragraph(rng, words, idents, flags)

    bound = [code.variables[0], code.variables[2], code.variables[4]]
    names = [bound[0], rng.choice(ROLES), bound[2]]
    key_blocks = tuple((name, f"{var} =", para(30)) for name, var in zip(names, bound))
    mechanism = [para(42) for _ in range(3)]
    mechanism[rng.randrange(3)] += " In symbols, " + rng.choice(MATH).format(a=rng.randint(2, 12)) + " for the defaults."
    myths = rng.sample(MYTHS, 3)
    return SyntheticLab(
        number=number,
        id=lab_id(number, slug),
        title=title,
        track=track,
        module=module,
        starter=code.text,
        region_start=code.region_start,
        region_lines=code.region_lines,
        summary=para(15),
        concept_goal=para(70),
        mechanism=tuple(mechanism),
        role=f"Computes the {qual} {noun} ledger of {topic} and prints it; reading material here, never run.",
        key_blocks=key_blocks,
        checkpoints=tuple(para(20) for _ in range(4)),
        misunderstandings=tuple(fill_slots(rng, myth, idents, flags) + " " + para(8) for myth in myths),
        interview=para(60) + " Put as a formula, " + rng.choice(MATH).format(a=rng.randint(2, 12)) + ".",
        intuition=tuple(para(24) for _ in range(2)),
    )


def fill_slots(rng: random.Random, template: str, idents: list[str], flags: list[str]) -> str:
    """Fill one sentence template with words drawn from the lab's vocabulary."""
    return template.format(
        noun=rng.choice(NOUNS), noun2=rng.choice(NOUNS), qual=rng.choice(QUALIFIERS),
        topic=rng.choice(TOPICS), unit=rng.choice(UNITS), num=rng.choice((2, 3, 4, 8, 16, 32, 64, 128, 256, 4096)),
        ident=rng.choice(idents), flag=rng.choice(flags),
    )


def paragraph(rng: random.Random, words: int, idents: list[str], flags: list[str]) -> str:
    """Return sentences adding up to at least `words` words."""
    sentences: list[str] = []
    for template in rng.sample(SENTENCES, len(SENTENCES)):  # no sentence twice in a paragraph
        if sum(len(s.split()) for s in sentences) >= words:
            break
        sentences.append(fill_slots(rng, template, idents, flags))
    return " ".join(sentences)


@dataclass(frozen=True)
class StarterCode:
    text: str
    fields: tuple[str, ...]
    variables: tuple[str, ...]
    region_start: int
    region_lines: tuple[str, ...]


STARTER = Template('''"""$title: the $qual $noun ledger of $topic, counted from shapes alone.

$doc
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

$const_a = $a
# $comment_a
$const_b = $b
$const_c = $c


@dataclass(frozen=True)
class Config:
    """Shape of the toy workload; the defaults run in well under a second."""

    $f1: int = $d1
    $f2: int = $d2
    $f3: int = $d3
    $f4: int = $d4

    def __post_init__(self) -> None:
        if min(self.$f1, self.$f2, self.$f3, self.$f4) < 1:
            raise ValueError("every size must be positive")


def ceil_div(a: int, b: int) -> int:
    """Return a / b rounded up: the count of partly filled ${noun}s."""
    return -(-a // b)


def $helper1($f1: int, $f3: int) -> int:
    """Return the $unit one $noun costs before any $topic."""
    # $comment_c
    return $f1 * $f3 * $const_a


def $helper2(total: int, $f2: int) -> list[int]:
    """Split `total` into pieces of at most `$f2`, the last one possibly short."""
    sizes = []
    remaining = total
    while remaining > 0:
        take = min(remaining, $f2)
        sizes.append(take)
        remaining -= take
    return sizes


# region core
def $core(config: Config) -> dict[str, int]:
    """Build the $qual $noun ledger one line at a time, each line a figure the page explains."""
    # $comment_e
    $v1 = $helper1(config.$f1, config.$f3)
    $v2 = config.$f2 * config.$f4
    # $comment_f
    $v3 = $v1 * $v2
    $v4 = ceil_div($v3, $const_b)
    chunks = $helper2($v4, config.$f2)
    # $comment_g
    $v5 = len(chunks)
    $v6 = max(chunks) if chunks else 0
    $v7 = 0
    for index, size in enumerate(chunks):
        # $comment_h
        $v7 += size * (index % $k1 + 1)
    if $v7 > $const_c * $k2:
        # $comment_i
        spilled = $v7 - $const_c * $k2
    else:
        spilled = 0
    $v8 = $v3 + spilled
    # $comment_j
    assert $v5 * config.$f2 >= $v4, "the pieces must cover every $unit"
    return {
        "$v1": $v1,
        "$v3": $v3,
        "$v5": $v5,
        "$v6": $v6,
        "$v7": $v7,
        "$v8": $v8,
    }
# endregion


def report(result: dict[str, int]) -> None:
    """Print one aligned line per figure, in the order the ledger builds them."""
    width = max(len(name) for name in result)
    for name, value in result.items():
        print(f"{name:<{width}}  {value:>14}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the sizes from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--$flag1", type=int, default=$d1, help="$help1")
    parser.add_argument("--$flag2", type=int, default=$d2, help="$help2")
    parser.add_argument("--$flag3", type=int, default=$d3, help="$help3")
    parser.add_argument("--$flag4", type=int, default=$d4, help="$help4")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Build the config, run the ledger and print it."""
    args = parse_args(argv)
    config = Config(args.$f1, args.$f2, args.$f3, args.$f4)
    result = $core(config)
    report(result)
    print(f"$summary_label: {result['$v8']} $unit")


if __name__ == "__main__":
    main()
''')

COMMENTS = (
    "The {noun} is counted once per {noun2}, never per {unit}.",
    "Integer arithmetic only, so the figures are exact and compare with ==.",
    "Rounding up here is what makes the last {noun} partly empty.",
    "This is the only place the {qual} layout changes the count.",
    "Kept separate from the loop so the closed form can be checked against it.",
    "A real {topic} kernel fuses these steps; here they stay apart to be read.",
    "Order matters only for the spill, not for the totals.",
    "The defaults are small on purpose: the shape of the result is the point.",
    "Weighting by position models the {noun2} that arrive late.",
    "Anything above the budget goes to the slower tier.",
    "The same formula holds for every {noun2}, so one line covers them all.",
    "Counts, not timings: nothing here depends on the machine.",
)


def starter_code(rng: random.Random, title: str, qual: str, noun: str, topic: str) -> StarterCode:
    """Write the starter: argparse main, helpers, and a `core` region of about 30 lines."""
    fields = rng.sample(FIELDS, 4)
    names = rng.sample([f"{n}_{u}" for n in NOUNS for u in UNITS], 8)
    unit = rng.choice(UNITS)

    def comment() -> str:
        return rng.choice(COMMENTS).format(noun=rng.choice(NOUNS), noun2=rng.choice(NOUNS), unit=rng.choice(UNITS), qual=qual, topic=topic)

    doc = textwrap.fill(
        f"Each {noun} of the {qual} layout is priced in {unit}, then split into pieces and summed again "
        f"with a position weight, so the closed form and the loop can be compared. Only integers, so "
        f"every printed figure is exact; change the sizes on the command line to watch each line move.",
        width=96,
    )
    values = {
        "title": title, "qual": qual, "noun": noun, "topic": topic, "unit": unit, "doc": doc,
        "const_a": f"{noun.upper()}_{unit.upper()}", "const_b": f"{qual.upper()}_GRANULE",
        "const_c": f"{topic.upper()}_BUDGET",
        "a": rng.choice((2, 4, 8, 16)), "b": rng.choice((64, 128, 256, 512, 1024)), "c": rng.randint(100, 900),
        "helper1": f"{noun}_{unit}_per_item", "helper2": f"split_{qual}",
        "core": f"{qual}_{noun}_ledger", "k1": rng.randint(2, 7), "k2": rng.randint(2, 9),
        "summary_label": f"total {qual} {noun} {unit}",
    }
    for i, field in enumerate(fields, 1):
        values[f"f{i}"] = field
        values[f"d{i}"] = rng.choice((2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128))
        values[f"flag{i}"] = field.replace("_", "-")
        values[f"help{i}"] = f"{field.replace('_', ' ')} of the toy {noun}"
    for i, name in enumerate(names, 1):
        values[f"v{i}"] = name
    for key in "acefghij":
        values[f"comment_{key}"] = comment()
    text = STARTER.substitute(values)
    lines = text.splitlines()
    start = lines.index("# region core") + 2  # 1-based number of the line after the marker
    end = lines.index("# endregion") + 1
    region = tuple(lines[start - 1:end - 1])
    for name in (names[0], names[2], names[4]):
        hits = [line for line in region if f"{name} =" in line]
        assert len(hits) == 1, (name, hits)
    return StarterCode(text, tuple(fields), tuple(names), start, region)


# InfraLens format


def folded(key: str, text: str, indent: int = 0) -> str:
    """Return `key: >-` and the text wrapped under it, as the real manifests write prose."""
    pad = " " * (indent + 2)
    return f"{' ' * indent}{key}: >-\n" + textwrap.fill(text, width=100, initial_indent=pad, subsequent_indent=pad) + "\n"


def bullets(key: str, items: tuple[str, ...]) -> str:
    out = f"{key}:\n"
    for item in items:
        out += "  - >-\n" + textwrap.fill(item, width=100, initial_indent="    ", subsequent_indent="    ") + "\n"
    return out


def manifest(lab: SyntheticLab) -> str:
    """Return the lab's YAML manifest."""
    q = json.dumps  # a JSON string is a valid YAML double-quoted scalar
    text = "# yaml-language-server: $schema=../schema/lab.schema.json\n"
    text += f"number: {lab.number}\ntitle: {q(lab.title)}\ntrack: {lab.track}\n"
    text += folded("summary", lab.summary)
    text += f"topic: {q(lab.title.split(' ', 1)[1])}\n\n"
    text += folded("concept_goal", lab.concept_goal) + "\n"
    text += bullets("mechanism", lab.mechanism) + "\n"
    text += f"starters:\n  - path: {lab.starter_path}\n" + folded("role", lab.role, indent=4) + "    run: false\n\n"
    text += f"preview:\n  starter: {lab.starter_path}\n  region: core\n\nkey_blocks:\n"
    for name, bound, note in lab.key_blocks:
        text += f"  - name: {q(name)}\n    lines: {q(bound)}\n" + folded("note", note, indent=4)
    text += "\n" + bullets("checkpoints", lab.checkpoints) + "\n"
    text += bullets("misunderstandings", lab.misunderstandings) + "\n"
    text += folded("interview", lab.interview) + "\nintuition:\n"
    for i, item in enumerate(lab.intuition):
        text += "  - text: >-\n" + textwrap.fill(item, width=100, initial_indent=" " * 6, subsequent_indent=" " * 6) + "\n"
        text += f"    link: {{label: Official, title: {q('Notes on ' + lab.title)}, url: \"https://example.org/notes/{lab.id}/{i}\"}}\n"
    text += "\nfurther_reading:\n"
    text += f"  - {{kind: paper, title: {q(lab.title + ' in practice')}, url: \"https://example.org/papers/{lab.id}\"}}\n"
    text += f"  - {{kind: code, title: {q(lab.module)}, url: \"https://example.org/code/{lab.id}\"}}\n"
    return text


def generate(root: Path, n: int, *, tracks: int = 10, seed: int = 0) -> None:
    """Write an InfraLens site of `n` labs into `root`."""
    (root / "labs").mkdir(parents=True, exist_ok=True)
    site = "title: Synthetic InfraLens\ntagline: A generated site for benchmarks.\ntracks:\n"
    site += "".join(f"  - id: {tid}\n    title: {json.dumps(title)}\n" for tid, title in tracks_of(tracks))
    (root / "site.yml").write_text(site, encoding="utf-8")
    for number in range(1, n + 1):
        lab = make_lab(number, tracks=tracks, seed=seed)
        (root / "labs" / f"{lab.id}.yml").write_text(manifest(lab), encoding="utf-8")
        starter = root / lab.starter_path
        starter.parent.mkdir(parents=True, exist_ok=True)
        starter.write_text(lab.starter, encoding="utf-8")


# Hugo format

HUGO_CONFIG = """baseURL = "https://example.org/"
title = "Synthetic InfraLens"
disableKinds = ["taxonomy", "term", "RSS", "sitemap"]

[outputs]
  home = ["HTML", "JSON"]

[markup.highlight]
  codeFences = true
  noClasses = false
  guessSyntax = false

[markup.goldmark.extensions.passthrough]
  enable = true
  [markup.goldmark.extensions.passthrough.delimiters]
    inline = [["$", "$"]]
    block = [["$$", "$$"]]
"""

HUGO_LAYOUTS = {
    "baseof.html": """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ .Title }} · {{ site.Title }}</title>
<link rel="stylesheet" href="{{ "css/site.css" | relURL }}">
<script src="{{ "js/site.js" | relURL }}" defer></script>
</head>
<body>
<header><a href="{{ "/" | relURL }}">{{ site.Title }}</a></header>
<div class="layout">
{{ with .Params.track }}{{ partialCached "nav.html" . . }}{{ end }}
<main>{{ block "main" . }}{{ end }}</main>
</div>
</body>
</html>
""",
    "single.html": """{{ define "main" }}
<h1>{{ with .Params.number }}Lab {{ . }}: {{ end }}{{ .Title }}</h1>
{{ with .Params.summary }}<p class="summary">{{ . | markdownify }}</p>{{ end }}
{{ .Content }}
{{ end }}
""",
    "list.html": """{{ define "main" }}
<h1>{{ .Title }}</h1>
<ul>{{ range .Pages }}<li><a href="{{ .RelPermalink }}">{{ .Title }}</a></li>{{ end }}</ul>
{{ end }}
""",
    "home.html": """{{ define "main" }}
<h1>{{ site.Title }}</h1>
{{ range site.Params.tracks }}
{{ $track := .id }}
<h2>{{ .title }}</h2>
<ul>{{ range where (where site.RegularPages "Section" "labs") "Params.track" $track }}<li><a href="{{ .RelPermalink }}">{{ .Title }}</a>: {{ .Params.summary | markdownify }}</li>{{ end }}</ul>
{{ end }}
{{ end }}
""",
    "home.json": """{{- $pages := slice -}}
{{- range where site.RegularPages "Section" "labs" -}}
{{- $pages = $pages | append (dict "title" .Title "url" .RelPermalink "summary" .Params.summary "text" .Plain) -}}
{{- end -}}
{{- $pages | jsonify -}}
""",
    "_partials/nav.html": """<nav class="sidenav">
{{ $track := . }}
<ul>{{ range where (where site.RegularPages "Section" "labs") "Params.track" $track }}<li><a href="{{ .RelPermalink }}">{{ .Params.number }} {{ .Title }}</a></li>{{ end }}</ul>
</nav>
""",
    "_markup/render-passthrough.html": """{{ transform.ToMath .Inner (dict "displayMode" (eq .Type "block") "output" "mathml") }}""",
}

HUGO_CSS = """body{margin:0;font:16px/1.6 system-ui,sans-serif;color:#1d232a;background:#fff}
header{padding:.6rem 1.2rem;border-bottom:1px solid #d8dde3}
.layout{display:grid;grid-template-columns:16rem minmax(0,1fr);gap:2rem;padding:1rem 1.2rem}
.sidenav ul{list-style:none;margin:0;padding:0;font-size:.9rem}
main{max-width:72ch}
pre{overflow-x:auto;padding:.8rem;background:#f6f8fa;border-radius:6px}
.chroma .hl{background:#fff5b1}.chroma .lnt,.chroma .ln{color:#7f8c8d;margin-right:.8em}
.chroma .k,.chroma .kn,.chroma .kd{color:#8959a8}.chroma .s,.chroma .s1,.chroma .s2,.chroma .sd{color:#718c00}
.chroma .c,.chroma .c1{color:#8e908c;font-style:italic}.chroma .mi,.chroma .m{color:#f5871f}
.chroma .nf,.chroma .nc{color:#4271ae}.chroma .o,.chroma .ow{color:#3e999f}
@media (max-width:60rem){.layout{grid-template-columns:1fr}}
"""

HUGO_JS = """document.querySelectorAll("pre").forEach(function (pre) {
  var button = document.createElement("button");
  button.textContent = "Copy";
  button.addEventListener("click", function () { navigator.clipboard.writeText(pre.innerText); });
  pre.before(button);
});
"""


def toml_front_matter(values: dict) -> str:
    lines = [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    return "+++\n" + "\n".join(lines) + "\n+++\n"


def hugo_lab_page(lab: SyntheticLab) -> str:
    """Return the Markdown of a lab page: the same sections, prose and excerpt as InfraLens shows."""
    start = lab.region_start
    marked = [i + 1 for i, line in enumerate(lab.region_lines) if any(bound in line for _, bound, _ in lab.key_blocks)]
    source = f"/code/{lab.id}/{Path(lab.module).stem}/"
    out = toml_front_matter({"title": lab.title, "number": lab.number, "track": lab.track, "summary": lab.summary, "weight": lab.number})
    out += f"\n## Read code to understand the concept\n\n{lab.concept_goal}\n"
    out += "\n## Core mechanism\n\n" + "".join(f"- {item}\n" for item in lab.mechanism)
    out += f"\n## Annotated starter links\n\n- [{lab.starter_path}]({source}) ([raw](/{lab.starter_path})): {lab.role}\n"
    out += f"\n## Starter Preview\n\n```python {{linenos=inline,linenostart={start},hl_lines={json.dumps(marked)},anchorlinenos=true,lineanchors=L}}\n"
    out += "\n".join(lab.region_lines) + "\n```\n\n"
    out += f"Excerpt from {lab.starter_path}. The linked starter file is the source of truth.\n"
    out += "\n## Key code blocks\n"
    for (name, _, note), line in zip(lab.key_blocks, marked):
        out += f"\n### {name}\n\nLine [{start + line - 1}]({source}#L{start + line - 1}). {note}\n"
    out += "\n## How to read this code\n\n" + "".join(f"- {item}\n" for item in lab.checkpoints)
    out += "\n## What this code does not mean\n\n" + "".join(f"- {item}\n" for item in lab.misunderstandings)
    out += f"\n## How to say it out loud\n\n{lab.interview}\n"
    out += "\n## Additional intuition\n\n" + "".join(
        f"- {item} Official: [Notes on {lab.title}](https://example.org/notes/{lab.id}/{i})\n" for i, item in enumerate(lab.intuition)
    )
    out += "\n## Official, paper and practical references\n\n"
    out += f"- paper: [{lab.title} in practice](https://example.org/papers/{lab.id})\n"
    out += f"- code: [{lab.module}](https://example.org/code/{lab.id})\n"
    return out


def hugo_source_page(lab: SyntheticLab) -> str:
    """Return the Markdown of a starter's source view: the whole file, every line anchored."""
    out = toml_front_matter({"title": lab.starter_path, "track": lab.track})
    out += f"\nFrom [Lab {lab.number}: {lab.title}](/labs/{lab.id}/).\n\n"
    return out + "```python {linenos=inline,anchorlinenos=true,lineanchors=L}\n" + lab.starter.rstrip("\n") + "\n```\n"


def hugo_site(root: Path, n: int, *, tracks: int = 10, seed: int = 0) -> None:
    """Write a Hugo site with the same `n` labs into `root`: config, theme, content, raw starters."""
    for relative, text in HUGO_LAYOUTS.items():
        path = root / "layouts" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    params = "".join(f"\n[[params.tracks]]\n  id = {json.dumps(tid)}\n  title = {json.dumps(title)}\n" for tid, title in tracks_of(tracks))
    (root / "hugo.toml").write_text(HUGO_CONFIG + params, encoding="utf-8")
    for relative, text in (("static/css/site.css", HUGO_CSS), ("static/js/site.js", HUGO_JS)):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    (root / "content" / "labs").mkdir(parents=True, exist_ok=True)
    (root / "content" / "labs" / "_index.md").write_text(toml_front_matter({"title": "Labs"}), encoding="utf-8")
    (root / "content" / "code").mkdir(parents=True, exist_ok=True)
    (root / "content" / "code" / "_index.md").write_text(toml_front_matter({"title": "Starters"}), encoding="utf-8")
    for number in range(1, n + 1):
        lab = make_lab(number, tracks=tracks, seed=seed)
        (root / "content" / "labs" / f"{lab.id}.md").write_text(hugo_lab_page(lab), encoding="utf-8")
        page = root / "content" / "code" / lab.id / f"{Path(lab.module).stem}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(hugo_source_page(lab), encoding="utf-8")
        raw = root / "static" / lab.starter_path  # InfraLens also publishes the raw starter
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(lab.starter, encoding="utf-8")


# Edits for rebuild benchmarks


def lab_files(root: Path, number: int) -> tuple[Path, Path]:
    """Return the manifest and the starter of lab `number` in a generated site."""
    manifest_path = next((root / "labs").glob(f"lab-{number:04d}-*.yml"))
    starter = next((root / "code" / manifest_path.stem).glob("*.py"))
    return manifest_path, starter


def edit_prose(root: Path, number: int, word: str) -> None:
    """Replace the first word of lab `number`'s concept_goal with `word` (letters and digits)."""
    path, _ = lab_files(root, number)
    text = path.read_text(encoding="utf-8")
    edited = re.sub(r"(concept_goal: >-\n  )\S+", lambda m: m.group(1) + word, text, count=1)
    assert edited != text or word in text
    write_atomically(root, path, edited)


def hugo_lab_file(root: Path, number: int) -> Path:
    """The Markdown page of lab `number` in the Hugo twin."""
    return next((root / "content" / "labs").glob(f"lab-{number:04d}-*.md"))


def edit_hugo_prose(root: Path, number: int, word: str) -> None:
    """In the Hugo twin, replace the first word of lab `number`'s concept text (as `edit_prose` does)."""
    path = hugo_lab_file(root, number)
    text = path.read_text(encoding="utf-8")
    edited = re.sub(r"(## Read code to understand the concept\n\n)\S+", lambda m: m.group(1) + word, text, count=1)
    assert edited != text or word in text
    write_atomically(root, path, edited)


def edit_starter_comment(root: Path, number: int, word: str) -> None:
    """Rewrite the first comment inside lab `number`'s region so that it starts with `word`."""
    _, path = lab_files(root, number)
    lines = path.read_text(encoding="utf-8").split("\n")
    inside = lines.index("# region core")
    first = next(i for i in range(inside + 1, len(lines)) if lines[i].lstrip().startswith("# "))
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    lines[first] = f"{indent}# {word} marks an edit made by the benchmark."
    write_atomically(root, path, "\n".join(lines))


def write_atomically(root: Path, path: Path, text: str) -> None:
    """Replace `path` in one step, so a watcher never sees it half written.

    The temporary file sits in the site's root, which no watcher scans (only site.yml there)."""
    partial = root / f".{path.name}.partial"
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="Number of labs.")
    parser.add_argument("dir", type=Path, help="Folder to write the InfraLens site into.")
    parser.add_argument("--tracks", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hugo", type=Path, help="Also write the Hugo site with the same content here.")
    args = parser.parse_args()
    generate(args.dir, args.n, tracks=args.tracks, seed=args.seed)
    print(f"wrote {args.n} labs into {args.dir}")
    if args.hugo:
        hugo_site(args.hugo, args.n, tracks=args.tracks, seed=args.seed)
        print(f"wrote the Hugo site into {args.hugo}")


if __name__ == "__main__":
    main()
