-- The jobs view shows every column of its tables again.
--
-- `SELECT *` in a view is expanded when the view is created, so the view made by version 1
-- never showed deadline_seconds, added by version 2. Columns may be appended in place.
CREATE OR REPLACE VIEW awa_fast.jobs AS
    SELECT * FROM awa_fast.jobs_hot
    UNION ALL
    SELECT * FROM awa_fast.jobs_deferred;
