"""Peer benchmarks: run other Postgres-backed Python job queues the same way.

Entry point: ``python -m benches peers --help``; see ``benches/README.md``.
"""
