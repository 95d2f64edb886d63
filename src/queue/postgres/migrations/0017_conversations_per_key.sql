-- Conversations are per key: a conversation is its key's id, and two keys'
-- conversations of one id are two (so naming an id tells a key nothing of
-- another key's). The owner is part of the primary key (`''` for jobs from
-- before keys). Existing conversations become one per key that wrote turns
-- in them, each from its earliest turn: a conversation of two keys from
-- before owners were recorded is split between them.
CREATE TABLE conversations_per_key (
    owner TEXT COLLATE "C" NOT NULL,
    id TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (owner, id)
);
INSERT INTO conversations_per_key (owner, id, created_at)
SELECT COALESCE(owner, ''), conversation_id, MIN(created_at) FROM jobs
WHERE conversation_id IS NOT NULL
GROUP BY COALESCE(owner, ''), conversation_id;
DROP TABLE conversations;
ALTER TABLE conversations_per_key RENAME TO conversations;
