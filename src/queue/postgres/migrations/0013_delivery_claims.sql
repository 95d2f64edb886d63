-- Fenced delivery claims: every claim of a delivery takes the next
-- generation, and a sender settles with the generation it claimed; a
-- settle whose generation is no longer the delivery's (another sender
-- claimed it after this one's lease ran out) changes nothing.
ALTER TABLE deliveries ADD COLUMN claims BIGINT NOT NULL DEFAULT 0;
