"""``python -m langgraph_effects.cli``: the console, as the ``langgraph-effects`` script runs it."""

import sys

from . import main

sys.exit(main())
