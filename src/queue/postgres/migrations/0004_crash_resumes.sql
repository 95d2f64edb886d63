-- A resume after the worker died is counted apart from attempts.
ALTER TABLE jobs ADD COLUMN crash_resumes INTEGER NOT NULL DEFAULT 0;
