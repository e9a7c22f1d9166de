"""Allow `python -m infralens`."""

from infralens.cli import main

main()
