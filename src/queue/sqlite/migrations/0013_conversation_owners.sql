-- Who owns each conversation: the first key to write it. The submit that
-- starts a conversation claims its row in the same transaction that inserts
-- the job, so of two keys starting one new id at once exactly one wins (the
-- primary key decides); a job of another key continuing it is refused.
-- Conversations from before this table are owned by their earliest job's
-- owner (NULL for jobs from before keys: only a key that may read every
-- key's conversations continues one).
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    owner TEXT,
    created_at INTEGER NOT NULL
);
INSERT INTO conversations (id, owner, created_at)
SELECT j.conversation_id, j.owner, j.created_at FROM jobs j
WHERE j.conversation_id IS NOT NULL
  AND j.id = (SELECT e.id FROM jobs e WHERE e.conversation_id = j.conversation_id
              ORDER BY e.created_at, e.id LIMIT 1);
