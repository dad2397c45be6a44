-- Leadership is a term that expires (awa_fast.maintenance.leader), not a session advisory
-- lock: a lock stays with its session while the session's socket lives, so a leader whose
-- process was paused (a stopped process, a frozen VM) or cut off kept it, and maintenance
-- stopped for every host until the server gave up on the connection.
--
-- One row. The leader renews its term every election interval, each renewal pushing
-- expires_at (the database's clock) a few intervals ahead; a host finding the term expired
-- begins the next one. Every maintenance transaction first locks this row FOR KEY SHARE
-- where term is still its own and unexpired, so a leader woken after its term ended
-- changes nothing, and the next term cannot begin until the transactions of the last
-- have ended.
--
-- term is UNIQUE so that it is a key column: a renewal, which leaves it as it is, takes a
-- lock that coexists with those FOR KEY SHARE locks; a new term changes it, which must
-- wait for them.
CREATE TABLE awa_fast.leader (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    term bigint NOT NULL UNIQUE,
    -- Who holds the term (host name, pid, and an id of that process's leader), for
    -- operators and for the holder's renewals.
    holder text,
    expires_at timestamptz NOT NULL
);
INSERT INTO awa_fast.leader (term, expires_at) VALUES (0, '-infinity');
