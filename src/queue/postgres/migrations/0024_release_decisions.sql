-- The release gate's decisions, shared by every daemon on the store
-- (queue/releases.rs): one row a content (its identity), its verdict, the
-- decision as JSON, and its number. Each write takes the next number from
-- the one row of `release_seq` in its own transaction, so numbers commit in
-- order and a daemon reads on from the highest it has seen.
CREATE TABLE release_decisions (
    identity   TEXT COLLATE "C" PRIMARY KEY,
    verdict    TEXT NOT NULL,
    decision   TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    decided_at BIGINT NOT NULL
);
CREATE INDEX release_decisions_seq ON release_decisions (seq);
CREATE TABLE release_seq (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    seq      BIGINT NOT NULL
);
INSERT INTO release_seq (seq) VALUES (0);
