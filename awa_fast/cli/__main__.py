"""``python -m awa_fast.cli``: the ``awa-fast`` command."""

import sys

from awa_fast.cli import main

sys.exit(main())
