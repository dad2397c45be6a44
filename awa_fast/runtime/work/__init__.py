"""The working side of a runtime: where claimed jobs run (forked worker processes or this
process), which start when, and how each handler's end becomes one outcome record."""
