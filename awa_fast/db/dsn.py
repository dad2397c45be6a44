"""Connection strings naming another database on the same server.

The embedded cluster, the benchmark harness and the tests make databases of their own
beside the one a user names. The URL is parsed, not cut at its last ``/``: query
parameters such as ``sslmode=require`` stay, a ``host`` that is a Unix socket directory
(it contains ``/``) works, and so does a URL that names no database.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from psycopg import conninfo

URL_SCHEMES = ("postgresql", "postgres")


def with_database(dsn: str, name: str) -> str:
    """``dsn`` with database ``name`` in place of its own, everything else kept: a URL
    stays a URL (its ``dbname`` parameter, which libpq prefers to the path, replaced too),
    and a ``key=value`` string gets ``dbname``."""
    parts = urlsplit(dsn)
    if parts.scheme not in URL_SCHEMES:
        return conninfo.make_conninfo(dsn, dbname=name)
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(key == "dbname" for key, _ in pairs):
        query = urlencode([(key, name if key == "dbname" else value) for key, value in pairs])
    return urlunsplit(parts._replace(path="/" + quote(name, safe=""), query=query))


def database_of(dsn: str) -> str:
    """The database ``dsn`` names (a URL or a ``key=value`` string)."""
    name = conninfo.conninfo_to_dict(dsn).get("dbname")
    if not name:
        raise ValueError(f"the connection string names no database: {dsn!r}")
    return str(name)
