"""The Awa SDK's raw client (its PyO3 ``Client``), for legacy code written against it: the
asyncio client's methods, and each one's ``name_sync`` twin from the synchronous client."""

from __future__ import annotations

from typing import Any

from awa_fast.client import AsyncClient
from awa_fast.client_sync import Client

# The Awa SDK's queue storage engine, which RawClient (like the clients) has no part of.
_STORAGE_ENGINE_METHODS = frozenset(
    {"install_queue_storage", "prepare_queue_storage_schema", "install_queue_storage_sync"}
)


class RawClient:
    """The Awa SDK's raw client (its PyO3 ``Client``), for legacy code written against it:
    its asynchronous methods are :class:`AsyncClient`'s and each ``name_sync`` is
    :class:`Client`'s ``name``, each side on a pool of its own. The SDK's storage-engine
    methods have no counterpart here, and raise AttributeError saying so."""

    def __init__(
        self, database_url: str, max_connections: int = 10, *, transaction_pooling: bool = False
    ) -> None:
        self._async = AsyncClient(
            database_url, max_connections=max_connections, transaction_pooling=transaction_pooling
        )
        self._sync = Client(
            database_url, max_connections=max_connections, transaction_pooling=transaction_pooling
        )

    def __getattr__(self, name: str) -> Any:
        if name in _STORAGE_ENGINE_METHODS:
            raise AttributeError(
                f"RawClient.{name}: the Awa SDK's queue storage engine has no counterpart "
                "in awa-fast, which has one storage"
            )
        if name.endswith("_sync"):
            return getattr(self._sync, name.removesuffix("_sync"))
        return getattr(self._async, name)

    async def close(self) -> None:
        """Close both sides' pools (and stop handlers started here)."""
        await self._async.close()
        self._sync.close()

    def close_sync(self) -> None:
        """Close the synchronous side's pool: the SDK's name for it."""
        self._sync.close()
