-- Leadership is a term that expires (awa_fast.maintenance.leader), not a session advisory
-- lock: a lock stays with its session while the session's socket lives, so a leader whose
-- process was paused (a stopped process, a frozen VM) or cut off kept it, and maintenance
-- stopped for every host until the server gave up on the connection.
--
-- One row. The leader renews its term every election interval, each renewal pushing
-- expires_at (the database's clock) a few intervals ahead; a host finding the term expired
-- begins the next one. Every maintenance transaction first takes a lock shared by the
-- term's transactions and checks that the term is still its own and unexpired, so a
-- leader woken after its term ended changes nothing; beginning a term takes that lock
-- exclusively, so the next term cannot begin until the transactions of the last have
-- ended (awa_fast/db/sql/maintenance.sql, leader_elect and leader_fence).
--
-- Hosts of an earlier version elect by the advisory lock still: while both versions run
-- (a rolling upgrade), one host of each may lead.
CREATE TABLE awa_fast.leader (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    term bigint NOT NULL,
    -- Who holds the term (host name, pid, and an id of that process's leader), for
    -- operators and for the holder's renewals.
    holder text,
    expires_at timestamptz NOT NULL
);
INSERT INTO awa_fast.leader (term, expires_at) VALUES (0, '-infinity');
