-- Where a forked job comes from: the source job and the first turn the
-- fork ran live (its earlier turns replay the source's journal). NULL for
-- every job that is not a fork.
ALTER TABLE jobs ADD COLUMN forked_from TEXT;
ALTER TABLE jobs ADD COLUMN forked_at_turn INTEGER;
