ALTER TABLE jobs ADD COLUMN messages TEXT;
ALTER TABLE jobs ADD COLUMN conversation_id TEXT;
CREATE INDEX jobs_conversation ON jobs (conversation_id, id) WHERE conversation_id IS NOT NULL;
