-- A job may run over given chat messages instead of its bundle's user prompt,
-- and may continue a conversation.
ALTER TABLE jobs ADD COLUMN messages TEXT;
ALTER TABLE jobs ADD COLUMN conversation_id TEXT COLLATE "C";
CREATE INDEX jobs_conversation ON jobs (conversation_id, id) WHERE conversation_id IS NOT NULL;
