"""Maintenance: leader election, promotion, rescue and retention (DESIGN.md §4).

Every host runs the service; only the elected leader does the work, so a database shared by
many hosts is maintained once.
"""
