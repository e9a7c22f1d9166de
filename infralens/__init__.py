"""InfraLens: build runnable, annotated code-reading labs into a static site.

The pipeline, one module a stage (build.py runs them, one lab at a time, only for labs that changed):

    workspace  read site.yml, labs/*.yml, starters      ← the only module that touches the disk:
    parse      manifest text → Site, Lab                   inputs, caches (--cache-dir) and output/
    resolve    Lab + starter → Excerpt, key blocks bound
    highlight  starter text → per-line HTML
    render     resolved lab → lab page and source views (templates: the theme, infralens.theme)
    search     resolved lab → search documents → index chunks
    links      rendered pages → broken links (--strict, `infralens links`)
    workspace  commit: staged files → output/

Declarations: models.py (every manifest field, declared once) over schema.py (the spec types).
Shared by the stages: markdown.py (the one Markdown parser), mathml.py, urls.py, errors.py.
Beside the pipeline: runner.py (starters as processes, under supervise.py and, with --sandbox,
sandbox.py) with results.py and claims.py for `check`; serve.py (the long-lived server); scaffold.py (`new`); cli.py (the command-line edge).
"""

__version__ = "0.1.0"
