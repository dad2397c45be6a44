"""Maintenance: the leader's services, each in a module of its own (promoter, rescuer,
cleaner, descriptor_cleaner, vacuum, counts, rings, cron, batch_ops), composed by
:mod:`.service`.

Every host runs the composition; only the elected leader (:mod:`.leader`) does the work,
so a database shared by many hosts is maintained once.
"""
