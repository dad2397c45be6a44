"""Connection strings: another database on the same server, and the servers a URL names.

A URL may name several servers, as libpq reads it (``postgresql://a:5432,b:5432/app``, or
``host=a,b``): libpq tries them in turn. Connections that write must reach the primary,
so :func:`for_writes` asks libpq for a read-write session when a URL names several and
says nothing itself (docs/high-availability.md).

The embedded cluster, the benchmark harness and the tests make databases of their own
beside the one a user names. The URL is parsed, not cut at its last ``/``: query
parameters such as ``sslmode=require`` stay, a ``host`` that is a Unix socket directory
(it contains ``/``) works, and so does a URL that names no database.
"""

from __future__ import annotations

import os
from itertools import zip_longest
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from psycopg import conninfo

from awa_fast.errors import ConfigError

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


# libpq's target_session_attrs values; the first two make sure of a primary.
WRITABLE = ("read-write", "primary")
SESSION_ATTRS = (*WRITABLE, "any", "read-only", "standby", "prefer-standby")


def _given(dsn: str) -> dict[str, str]:
    """``dsn``'s parameters, with the environment's where it sets none, as libpq reads
    them: a URL that names no host connects to ``$PGHOST``."""
    given = {k: str(v) for k, v in conninfo.conninfo_to_dict(dsn).items() if v is not None}
    for name, env in (
        ("host", "PGHOST"),
        ("hostaddr", "PGHOSTADDR"),
        ("port", "PGPORT"),
        ("target_session_attrs", "PGTARGETSESSIONATTRS"),
    ):
        if name not in given and os.environ.get(env):
            given[name] = os.environ[env]
    return given


def servers_of(dsn: str) -> list[str]:
    """The servers ``dsn`` names, as ``host:port``, in the order libpq tries them (a
    Unix socket directory for a host left empty: "the local socket"). Raises ConfigError
    when the hosts and ports do not pair up as libpq pairs them: one port for all, or
    one for each host."""
    given = _given(dsn)
    hosts = given.get("host", "").split(",")
    addrs = given.get("hostaddr", "").split(",")
    if "host" in given and "hostaddr" in given and len(addrs) != len(hosts):
        raise ConfigError(
            f"the database URL names {len(hosts)} hosts and {len(addrs)} hostaddrs: give one "
            "hostaddr for each host"
        )
    names = [host or addr for host, addr in zip_longest(hosts, addrs, fillvalue="")]
    ports = given.get("port", "").split(",")
    if len(ports) not in (1, len(names)):
        raise ConfigError(
            f"the database URL names {len(names)} hosts and {len(ports)} ports: give one port "
            "for all of them, or one for each"
        )
    if len(ports) == 1:
        ports *= len(names)
    pairs = zip(names, ports, strict=True)
    return [f"{name or 'the local socket'}:{port or 5432}" for name, port in pairs]


def for_writes(dsn: str) -> str:
    """``dsn`` for connections that write: checked, and, when it names several hosts and
    sets no ``target_session_attrs``, with ``target_session_attrs=read-write``, so that
    libpq passes over a standby to the primary (libpq's own default, ``any``, takes the
    first server that answers). A setting that would send connections to a standby is
    refused: only the primary takes writes."""
    servers = servers_of(dsn)
    attrs = _given(dsn).get("target_session_attrs")
    if attrs is not None and attrs not in SESSION_ATTRS:
        raise ConfigError(
            f"target_session_attrs={attrs} is not one libpq knows: {', '.join(SESSION_ATTRS)}"
        )
    if attrs is None and len(servers) > 1:
        return with_parameter(dsn, "target_session_attrs", WRITABLE[0])
    if attrs is None:
        return dsn
    if attrs in WRITABLE or (attrs == "any" and len(servers) == 1):
        return dsn
    raise ConfigError(
        f"target_session_attrs={attrs} lets a connection land on a standby, where no write "
        f"can go ({', '.join(servers)}): give read-write or primary (a standby's URL is for "
        "reads alone: read_url)"
    )


def for_reads(dsn: str) -> str:
    """``dsn`` for connections that only read, checked: any server will do, a standby
    included, as its ``target_session_attrs`` says (``prefer-standby``, say)."""
    servers_of(dsn)
    attrs = _given(dsn).get("target_session_attrs")
    if attrs is not None and attrs not in SESSION_ATTRS:
        raise ConfigError(
            f"target_session_attrs={attrs} is not one libpq knows: {', '.join(SESSION_ATTRS)}"
        )
    return dsn


def with_parameter(dsn: str, name: str, value: str) -> str:
    """``dsn`` with the connection parameter ``name`` set to ``value``: a URL stays a URL,
    the pair added to its query as it is, and a ``key=value`` string gets the pair."""
    parts = urlsplit(dsn)
    if parts.scheme not in URL_SCHEMES:
        return conninfo.make_conninfo(dsn, **{name: value})
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == name for key, _ in pairs):
        query = urlencode([(k, value if k == name else v) for k, v in pairs])
    else:
        query = "&".join(filter(None, [parts.query, urlencode({name: value})]))
    return urlunsplit(parts._replace(query=query))
