"""``python -m awa_fast``: the ``awa-fast`` command line, the Awa SDK's command tree
(``python -m awa``) included."""

import sys

from awa_fast.cli import main

if __name__ == "__main__":
    sys.exit(main())
