"""The editors' JSON Schemas: generated from the validator's declarations, committed, never stale."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import REPO, TESTS, run_infralens

from infralens.model.parse import json_schemas

MANIFESTS = sorted((REPO / "labs").glob("*.yml")) + sorted((TESTS / "sites" / "sample" / "labs").glob("*.yml"))


@pytest.mark.cli
def test_committed_schemas_are_up_to_date(tmp_path: Path) -> None:
    result = run_infralens("schema", "--out", str(tmp_path), cwd=REPO)
    assert result.returncode == 0, result.stderr
    for name in [*json_schemas(), "reference.md"]:
        committed = (REPO / "schema" / name).read_text()
        assert (tmp_path / name).read_text() == committed, f"schema/{name} is stale: run `infralens schema`"


@pytest.mark.parametrize("manifest", MANIFESTS, ids=[m.stem for m in MANIFESTS])
@pytest.mark.unit
def test_every_manifest_the_build_accepts_validates_against_the_schema(manifest: Path) -> None:
    schema = json_schemas()["lab.schema.json"]
    jsonschema.validate(yaml.safe_load(manifest.read_text()), schema)


@pytest.mark.unit
def test_site_yml_validates_against_the_schema() -> None:
    jsonschema.validate(yaml.safe_load((REPO / "site.yml").read_text()), json_schemas()["site.schema.json"])


@pytest.mark.parametrize("case", ["unknown-key", "missing-required-field", "wrong-type", "link-not-http"])
@pytest.mark.unit
def test_the_schema_rejects_what_the_build_rejects(case: str) -> None:
    manifest = yaml.safe_load((TESTS / "invalid" / case / "labs" / "lab-01-broken.yml").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, json_schemas()["lab.schema.json"])


@pytest.mark.unit
def test_every_declared_field_is_in_the_schema_with_its_doc_and_nothing_else_is() -> None:
    from infralens.model.declare import declarations
    from infralens.model.lab import Lab
    from infralens.model.site import Site
    from infralens.model.starter import Starter

    schemas = json_schemas()
    lab = schemas["lab.schema.json"]
    for model, schema in ((Lab, lab), (Site, schemas["site.schema.json"]), (Starter, lab["properties"]["starters"]["items"])):
        declared = {meta["key"] or field.name: meta["spec"].doc for field, meta in declarations(model)}
        assert set(schema["properties"]) == set(declared), model
        for key, doc in declared.items():
            assert schema["properties"][key].get("description", "") == doc, (model, key)


@pytest.mark.unit
def test_a_records_description_is_its_docstrings_whole_first_paragraph() -> None:
    """The reference once cut `answer` mid-sentence: a record's doc was the first physical line of
    its wrapped docstring."""
    from infralens.model.declare import record
    from infralens.model.question import NumericAnswer

    whole = " ".join(NumericAnswer.__doc__.split("\n\n")[0].split())
    assert record(NumericAnswer, "answer").doc == whole
    assert whole.endswith("Exactly one of printed, recorded.")
