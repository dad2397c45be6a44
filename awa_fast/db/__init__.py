"""Storage: migrations and the named SQL the runtime and clients execute."""
