-- How many of a schedule's fires were passed over (late past the grace
-- under its `missed` policy, or while it was paused): shown with it.
ALTER TABLE schedules ADD COLUMN missed_fires BIGINT NOT NULL DEFAULT 0;
