"""The claiming side of a runtime: claim loops, the weighted shares and rate limits that
bound them, standby starts, and the listener whose news wakes them."""
