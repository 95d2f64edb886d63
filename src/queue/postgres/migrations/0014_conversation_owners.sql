-- Who owns each conversation: the first key to write it. The submit that
-- starts a conversation claims its row in the same transaction that inserts
-- the job, so of two keys starting one new id at once exactly one wins (the
-- primary key decides, across daemons); a job of another key continuing it
-- is refused. Conversations from before this table are owned by their
-- earliest job's owner (NULL for jobs from before keys: only a key that may
-- read every key's conversations continues one).
CREATE TABLE conversations (
    id TEXT COLLATE "C" PRIMARY KEY,
    owner TEXT,
    created_at BIGINT NOT NULL
);
INSERT INTO conversations (id, owner, created_at)
SELECT DISTINCT ON (conversation_id) conversation_id, owner, created_at FROM jobs
WHERE conversation_id IS NOT NULL
ORDER BY conversation_id, created_at, id;
