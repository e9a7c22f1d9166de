"""Scaffold: `infralens new` → a manifest and a starter that build and check pass at once.

The texts below are a contributor's starting point, so they say what to replace and how each
part is used; every number the page states is one the starter prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from infralens.errors import InputError, Mark, Problem
from infralens.load import load_project
from infralens.schema import did_you_mean

LAB_ID = re.compile(r"lab-(?P<number>\d{2,3})-(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)")

MANIFEST = """\
# yaml-language-server: $schema=../schema/lab.schema.json
number: {number}
title: {title}
track: {track}
summary: One line for the index, saying what this lab makes concrete.
topic: The handbook topic this lab belongs to, for the index's map
concrete: One line for the index's map, saying which mechanism the code pins down.
concept_goal: >-
  One paragraph: the concept the starter makes concrete, and what a reader should be able to
  explain after reading it.
mechanism:
  - The mechanism to keep in mind, in one sentence.
starters:
  - path: code/{lab_id}/{module}.py
    role: Prints the figures this lab talks about.
    run:
      timeout: 60
      expect: ['bytes per token: [0-9,]+']
preview:
  starter: code/{lab_id}/{module}.py
  region: core
key_blocks:
  - name: bytes_per_token
    lines: "bytes_per_token ="
    note: >-
      What this line computes and why it matters. Bind each note to text that occurs on exactly one
      line of the excerpt, a `{{from:, to:}}` span, or real line numbers like `12-14`.
checkpoints:
  - What to notice when reading the code.
misunderstandings:
  - What the code does not mean.
interview: >-
  How to explain the idea out loud in a few sentences.
intuition:
  - text: A sentence of intuition, with a link to where it is explained well.
    link: {{label: Official, title: PyTorch documentation, url: "https://pytorch.org/docs/stable/"}}
further_reading:
  - {{kind: official, title: PyTorch documentation, url: "https://pytorch.org/docs/stable/"}}
"""

STARTER = '''\
"""{title}: replace this with what the starter shows and how to run it."""

from __future__ import annotations

import argparse


def bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Return the KV-cache bytes one token adds: an example to replace with this lab's idea."""
    # region core
    # One K and one V vector per layer and per KV head.
    bytes_per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    # endregion
    return bytes_per_token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype-bytes", type=int, default=2)
    args = parser.parse_args()
    result = bytes_per_token(args.layers, args.kv_heads, args.head_dim, args.dtype_bytes)
    assert result == 2 * args.layers * args.kv_heads * args.head_dim * args.dtype_bytes
    print(f"bytes per token: {{result:,}}")


if __name__ == "__main__":
    main()
'''


@dataclass(frozen=True)
class Scaffold:
    """The two files `new` wrote."""

    manifest: Path
    starter: Path


def new_lab(site_path: Path, lab_id: str, track: str, title: str) -> Scaffold:
    """Write a manifest and a starter for a new lab, refusing to overwrite anything."""
    root = site_path.parent
    match = LAB_ID.fullmatch(lab_id)
    if not match:
        raise InputError([Problem(Mark(lab_id), "lab id must look like lab-NN-slug, e.g. lab-15-speculative-decoding")])
    project = load_project(site_path)
    tracks = [t.id for t in project.site.tracks]
    problems = []
    if track not in tracks:
        problems.append(Problem(Mark(project.site.path), f"unknown track {track!r}{did_you_mean(track, tracks)}; tracks: {', '.join(tracks)}"))
    number = int(match.group("number"))
    taken = next((lab for lab in project.labs if lab.number == number), None)
    if taken:
        problems.append(Problem(taken.number_mark, f"lab number {number} is already used by {taken.id}"))
    manifest = root / "labs" / f"{lab_id}.yml"
    module = match.group("slug").replace("-", "_")
    starter = root / "code" / lab_id / f"{module}.py"
    for path in (manifest, starter.parent):
        if path.exists():
            problems.append(Problem(Mark(str(path.relative_to(root))), "already exists; infralens new never overwrites"))
    if problems:
        raise InputError(problems)
    starter.parent.mkdir(parents=True)
    starter.write_text(STARTER.format(title=title), encoding="utf-8")
    quoted_title = '"' + title.replace("\\", "\\\\").replace('"', '\\"') + '"'
    manifest.write_text(
        MANIFEST.format(number=number, title=quoted_title, track=track, lab_id=lab_id, module=module),
        encoding="utf-8",
    )
    return Scaffold(manifest, starter)
