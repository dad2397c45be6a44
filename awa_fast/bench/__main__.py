"""``python -m awa_fast.bench PRODUCER URL NUMBER...``: run one producer, print its JSON."""

import sys

from awa_fast.bench.producers import main

if __name__ == "__main__":
    main(sys.argv[1:])
