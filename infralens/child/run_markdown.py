"""Run a Markdown starter's python blocks in order, in one namespace: the program `check` starts.

Usage: python run_markdown.py STARTER.md BLOCKS.json [ARG ...]

BLOCKS.json holds [[first line, code], ...] as infralens.markdown.python_blocks found them. Each
block is compiled with the Markdown file's name and its real line numbers, so a traceback points
at the line of the .md file. This file is run as a script by path and imports nothing of InfraLens:
the starter's environment is kept clean.
"""

import json
import sys


def main() -> None:
    path, blocks_file, *args = sys.argv[1:]
    with open(blocks_file, encoding="utf-8") as file:
        blocks = json.load(file)
    if not blocks:
        sys.exit(f"{path}: no python blocks to run")
    sys.argv = [path, *args]
    namespace = {"__name__": "__main__", "__file__": path}
    for line, code in blocks:
        exec(compile("\n" * (line - 1) + code, path, "exec"), namespace)


if __name__ == "__main__":
    main()
