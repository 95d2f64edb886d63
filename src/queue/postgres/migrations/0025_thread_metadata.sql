-- Threads (LangGraph's name for a conversation, queue/threads.rs): a
-- conversation carries its client's metadata (a JSON object; NULL is `{}`)
-- and when that last changed (NULL: when it was made). A conversation's
-- jobs say the rest (its status, its turns).
ALTER TABLE conversations ADD COLUMN metadata TEXT;
ALTER TABLE conversations ADD COLUMN updated_at BIGINT;
