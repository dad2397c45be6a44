"""The web dashboard (``pip install 'awa-fast[ui]'``): queues, jobs, the dead-letter queue
and periodic jobs, with the admin actions on them. ``awa-fast ui`` serves it on its own;
:func:`create_app` gives the ASGI app to mount in an application's own."""

from awa_fast.ui.app import create_app
from awa_fast.ui.security import BasicAuth, TokenAuth

__all__ = ["BasicAuth", "TokenAuth", "create_app"]
