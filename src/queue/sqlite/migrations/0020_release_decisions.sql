-- The release gate's decisions, shared by every daemon on the store
-- (queue/releases.rs): one row a content (its identity), its verdict, the
-- decision as JSON, and its number, taken from the one row of `release_seq` by each
-- write (SQLite's one writer commits them in order anyway).
CREATE TABLE release_decisions (
    identity   TEXT PRIMARY KEY,
    verdict    TEXT NOT NULL,
    decision   TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    decided_at INTEGER NOT NULL
);
CREATE INDEX release_decisions_seq ON release_decisions (seq);
CREATE TABLE release_seq (only_row INTEGER PRIMARY KEY CHECK (only_row = 1), seq INTEGER NOT NULL);
INSERT INTO release_seq (only_row, seq) VALUES (1, 0);
