"""`python -m grokray ...`: the CLI without its console script, e.g. from a source tree on PYTHONPATH (the GPU
device, where the bundle's packages sit in a --target folder and no `grokray` script is installed)."""

import sys

from .cli import entry

sys.exit(entry())
