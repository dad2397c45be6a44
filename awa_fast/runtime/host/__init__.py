"""This host in its database: its row and heartbeat, and the cancel flags it set on its own
attempts. Both the claiming and the working side build on it."""
