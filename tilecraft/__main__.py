"""``python -m tilecraft ...``: the ``tilecraft`` command."""
import sys

from tilecraft.cli import main

sys.exit(main())
