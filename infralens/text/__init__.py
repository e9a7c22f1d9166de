"""Text: prose and starter text → HTML, pure.

    markdown   the one Markdown parser (markdown-it-py): prose, Markdown starters' outlines and code
    mathml     one `$…$` formula → MathML, and the markdown-it rules that find formulas
    source     SourceLine and SourceFile: a starter's lines as the pages use them (records only)
    patterns   the one bounded matcher of a pattern over a run's output (the regex module, a time limit)
    highlight  a starter → per-line HTML (Pygments), tokenized once
    languages  a starter's language by its suffix: comment syntax, how it runs, its compiler, its symbols
    clike      a C++ or CUDA starter's definitions (tree-sitter): what a `symbol:` selects there

Imports nothing of the package but errors.
"""
