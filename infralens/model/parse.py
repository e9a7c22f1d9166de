"""Parse stage: site.yml and lab manifest text → validated frozen models.

Pure: takes a path (for messages) and text, returns a model or raises `InputError` with every
problem found. The validators are made from the models' own field declarations (models.py), and
so are the editors' JSON Schemas and schema/reference.md written from here.
"""

from __future__ import annotations

from infralens.errors import Mark, Note, Problems
from infralens.model.declare import record
from infralens.model.lab import (
    DEFAULT_KIND_LINE,
    TRACE_KIND_LINE,
    Intuition,
    Lab,
    answering_starter,
    mirrored_starter,
    question_id,
)
from infralens.model.run import run_name
from infralens.model.schema import INVALID, Context, Fields, Record, did_you_mean
from infralens.model.site import Site, Track
from infralens.model.starter import KeyBlockSpec, Starter
from infralens.model.yaml_input import compose


def _lab(f: Fields, ctx: Context) -> dict:
    """The fields a manifest does not write: its id and path, where its number and track are, and
    the defaults that depend on other keys."""
    v = f.values
    return {
        "id": ctx.name,
        "path": ctx.path,
        "topic": v["topic"] or v["title"],
        "concrete": v["concrete"] or v["summary"],
        "kind": (kind := v["kind"] or ("runnable" if any(s.run for s in v["starters"]) else "reading")),
        "kind_line": v["kind_line"] or (TRACE_KIND_LINE if kind == "trace" else DEFAULT_KIND_LINE),
        "intuition": tuple(i if isinstance(i, Intuition) else Intuition(text=i) for i in v["intuition"]),
        "number_mark": f.marks["number"],
        "track_mark": f.marks["track"],
    }


LAB = record(Lab, "lab manifest", finish=_lab)
SITE = record(Site, "site.yml", finish=lambda f, ctx: {"path": ctx.path})


def parse_site(path: str, text: str) -> Site:
    """Parse site.yml text into a Site."""
    problems = Problems()
    ctx = Context(path, problems, text)
    node = compose(text, ctx)
    site = SITE.check(node, ctx) if node is not None else INVALID
    if site is not INVALID:
        seen: dict[str, Track] = {}
        for track in site.tracks:
            if track.id in seen:
                problems.add(track.mark, f"duplicate track id {track.id!r}", Note(seen[track.id].mark, f"track {track.id!r} is first declared here"))
            seen.setdefault(track.id, track)
    problems.raise_if_any()
    return site


def parse_lab(path: str, lab_id: str, text: str) -> Lab:
    """Parse one manifest's text into a Lab; `lab_id` is the file stem."""
    problems = Problems()
    ctx = Context(path, problems, text, name=lab_id)
    node = compose(text, ctx)
    lab = LAB.check(node, ctx) if node is not None else INVALID
    problems.raise_if_any()
    _check_lab(lab, ctx)
    problems.raise_if_any()
    return lab


def _check_lab(lab: Lab, ctx: Context) -> None:
    """Checks within one manifest that the schema cannot express."""
    paths: dict[str, Starter] = {}
    for starter in lab.starters:
        if starter.path in paths:
            ctx.problems.add(starter.mark, f"duplicate starter {starter.path!r}")
        paths[starter.path] = starter
    written: dict[str, str] = {}
    for starter in lab.starters:
        for run in starter.runs:
            for name in run.artifacts:
                if name in written:
                    ctx.problems.add(starter.mark, f"artifact {name!r} of {run_name(starter.path, run.device)} is also written by {written[name]}; the lab page publishes one file of that name, so give each run its own")
                written.setdefault(name, run_name(starter.path, run.device))
    for step in lab.steps:
        if step.starter not in paths:
            listed = ", ".join(repr(p) for p in paths)
            ctx.problems.add(step.starter_mark, f"preview starter {step.starter!r} is not one of the lab's starters ({listed})")
    walked = {step.starter for step in lab.steps}
    for block in lab.key_blocks:
        if block.starter is not None and block.starter not in walked:
            ctx.problems.add(block.starter_mark, f"key block {block.name!r}: starter {block.starter!r} is not a step of the preview ({', '.join(repr(p) for p in dict.fromkeys(s.starter for s in lab.steps))})")
    seen: dict[str, KeyBlockSpec] = {}
    for block in lab.key_blocks:
        if block.name in seen:
            ctx.problems.add(block.mark, f"duplicate key block name {block.name!r}")
        seen[block.name] = block
    calculators: set[str] = set()
    for calc in lab.calculators:
        if calc.id in calculators:
            ctx.problems.add(calc.mark, f"duplicate calculator id {calc.id!r}")
        calculators.add(calc.id)
        if calc.after is not None and calc.after not in seen:
            ctx.problems.add(calc.mark, f"calculator {calc.id!r}: after: {calc.after!r} is not a key block's name{did_you_mean(calc.after, seen)}")
        path = mirrored_starter(lab, calc)
        starter = paths.get(path)
        if starter is None:
            ctx.problems.add(calc.mark, f"calculator {calc.id!r}: starter {path!r} is not one of the lab's starters")
        elif not path.endswith(".py") or starter.run is None:
            ctx.problems.add(calc.mark, f"calculator {calc.id!r}: its values come from a Python starter that runs, and {path!r} is not one")
    asked: dict[str, Mark] = {}
    for position, question in enumerate(lab.questions, start=1):
        qid = question_id(question, position)
        if qid in asked:
            ctx.problems.add(question.mark, f"question id {qid!r} is taken by another question; give this one its own `id`", Note(asked[qid], f"the question whose id is {qid!r}"))
        asked.setdefault(qid, question.mark)
        for block in question.blocks:
            if block.text not in seen:
                ctx.problems.add(block.mark, f"question {qid!r}: blocks: {block.text!r} is not a key block's name{did_you_mean(block.text, seen)}")
        recorded = question.answer.recorded if question.answer is not None else None
        if recorded is not None and recorded.block not in seen:
            ctx.problems.add(recorded.block_mark, f"question {qid!r}: recorded: block {recorded.block!r} is not a key block's name{did_you_mean(recorded.block, seen)}")
        if recorded is not None and question.answer.starter not in (None, lab.previewed):
            ctx.problems.add(question.answer.starter_mark, f"question {qid!r}: a recorded value is the previewed starter's ({lab.previewed}), which alone records state")
        if question.answer is not None:
            path = answering_starter(lab, question.answer)
            starter = paths.get(path)
            if starter is None or starter.run is None:
                what = "one of the lab's starters" if starter is None else "a starter that runs (it has no `run`)"
                ctx.problems.add(question.answer.starter_mark or question.answer.mark, f"question {qid!r}: starter {path!r} is not {what}; the answer is a figure its checked run prints")


def json_schemas() -> dict[str, dict]:
    """Return the editors' JSON Schemas, by file name, generated from the declarations above."""
    def document(record: Record, title: str) -> dict:
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": title,
            **record.json_schema(),
        }

    return {
        "lab.schema.json": document(LAB, "InfraLens lab manifest"),
        "site.schema.json": document(SITE, "InfraLens site.yml"),
    }


def _type_name(schema: dict) -> str:
    """Describe a JSON Schema type the way the reference tables do."""
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{str(schema['const']).lower()}`"
    if "anyOf" in schema:
        return " or ".join(_type_name(option) for option in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type_name(schema['items'])}"
    if kind == "object":
        return "mapping" if "title" not in schema else schema["title"]
    if kind == "integer" and "minimum" in schema:
        return f"integer ≥ {schema['minimum']}"
    if isinstance(kind, list):
        return "text"
    return {"string": "text", "number": "number", "integer": "integer"}.get(kind, str(kind))


def reference_markdown() -> str:
    """Return the manifest and site.yml reference as Markdown tables, from the same declarations."""
    lines = ["# Manifest reference", "", "Generated by `infralens schema` from the declarations the build validates with; do not edit.", ""]
    sections: list[tuple[str, dict]] = [("Lab manifest (`labs/<lab-id>.yml`)", LAB.json_schema()), ("`site.yml`", SITE.json_schema())]
    seen: set[str] = set()
    while sections:
        title, schema = sections.pop(0)
        lines += [f"## {title}", "", schema.get("description", ""), "", "| key | type | required | meaning |", "| --- | --- | --- | --- |"]
        required = set(schema.get("required", []))
        for key, field_schema in schema["properties"].items():
            nested = [field_schema] + field_schema.get("anyOf", []) + ([field_schema["items"]] if "items" in field_schema else [])
            nested += [option["items"] for option in field_schema.get("anyOf", []) if "items" in option]
            for candidate in nested:
                for option in [candidate] + candidate.get("anyOf", []):
                    if option.get("type") == "object" and "properties" in option and option.get("description") and option["description"] not in seen:
                        seen.add(option["description"])
                        sections.append((f"`{key}` entries", option))
            description = field_schema.get("description", "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{key}` | {_type_name(field_schema)} | {'yes' if key in required else 'no'} | {description} |")
        if "allOf" in schema:
            groups = [", ".join(f"`{option['required'][0]}`" for option in rule["oneOf"]) for rule in schema["allOf"]]
            lines += ["", *(f"Exactly one of {group}." for group in groups)]
        lines.append("")
    return "\n".join(lines)
