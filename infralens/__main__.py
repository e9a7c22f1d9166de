"""The `infralens` command (and `python -m infralens`): quiet on Ctrl-C from its first instant.

Importing the command-line module (click, the pipeline) takes a moment; Ctrl-C in it would print
a KeyboardInterrupt traceback. So the handler that ends the process quietly goes in first, and
the commands then install their own (build and check stop their work and say so).
"""

import signal
import sys


def main() -> None:
    signal.signal(signal.SIGINT, lambda signum, frame: sys.exit(130))
    # after the handler above, so Ctrl-C while the command loads exits quietly
    from infralens.cli import main as cli

    signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on, Ctrl-C is KeyboardInterrupt
    cli()


if __name__ == "__main__":
    main()
