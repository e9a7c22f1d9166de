"""Model: the manifest language and the records it builds, each field declared once.

    yaml_input manifest text → a composed YAML node tree, refusing tags, merge keys and bombs
    schema     the spec types (Text, Prose, ListOf, Record, …) that validate a YAML node tree
    declare    `declared(spec)` on a record's field: the one declaration everything reads
    expr       the calculators' expression language, checked in Python and compiled to JavaScript
    site       site.yml: Site, Track
    lab        a lab manifest: Lab, its sections and kinds, LabCard
    starter    starters, their runs, the preview and key blocks as declared
    calculator a calculator's inputs, outputs, presets and requirements
    question   a practice question: a numeric answer or a choice
    resolved   what the build resolves: the excerpt's parts and bound key blocks
    run        RunResult: what running one starter showed
    parse      manifest text → these records, or every problem at its position

The validator, the JSON Schemas, schema/reference.md, the claims check and search all read the
same declarations. Pure: no disk, no processes.
"""
