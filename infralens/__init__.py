"""InfraLens: build runnable, annotated code-reading labs into a static site.

The package is seven families and a few top-level modules. Each family is a subpackage whose face
(`__init__.py`) says what it holds; imports only run down this drawing, never up and never
sideways between the two families of one row (tests/test_layers.py reads every import, those
inside functions too, and holds the package to it; an import inside a function says why):

    __main__   the `infralens` command, quiet on Ctrl-C from its first instant
    cli        the command-line edge: every problem printed as `path:line:col: error: message`
    serve  scaffold           the long-lived server; `infralens new`
    build/     project → output/: pipeline (the stages in order), read, plan, pages, render,
               search, links, assets, session, workers, memory
    check/     starters as processes → RunResult: runner, process, verdicts, results (the store),
               devices, sandbox, shards, reports
    lab/  project/            pure work on one lab (resolve; the page features features.py lists:
                              state, calculators, questions, notebooks; shown, roofline, claims)
                              | the disk (workspace reads with its guards, keeps the caches;
                              commit writes output/ under a journal)
    model/     the manifest language: yaml_input, schema (spec types), declare, expr (calculator
               expressions), the records declared once each (site, lab, starter, calculator,
               question, resolved, run), parse
    text/      Markdown, math (MathML), a starter's lines and their highlighting → HTML
    errors  urls  child/      problems at a position; every address under output/; the programs
                              check starts by path (supervise, trace_state, probe, run_markdown),
                              which import nothing of the package

A build reads one Snapshot (build.read, through project.workspace) → plans from it (build.plan)
→ renders what changed (build.pages, lab.*, text.*) → commits once (project.commit).
"""

__version__ = "0.1.0"
