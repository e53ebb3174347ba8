"""``python -m bioqpfs``: the same command line as the ``bioqpfs`` console script."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
