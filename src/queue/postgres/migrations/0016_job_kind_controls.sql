-- What a job runs and the daemon's controls over it get columns of their
-- own (`queue::kind`); until now they rode in the submitter's `variables`
-- and the worker guessed the kind from them. Jobs already stored move theirs
-- here by the rule admission applies to a new submission, so a job queued
-- before the upgrade runs as it would have:
--   `group_chat` (a plan, set only by the runtime API) -> kind group_chat;
--   `only_stage` (a stage name) -> kind stage;
--   `tools` (a list or a comma-separated string), `max_agents` (a whole
--   number) -> controls;
--   `verbose` of a runtime query (a job with `user_id` in a conversation)
--   -> controls.verbose.
-- A value of another shape stays a variable, as admission would have
-- refused it. (The same rules as SQLite's 0015.)
ALTER TABLE jobs
    ADD COLUMN kind TEXT NOT NULL DEFAULT '{"type":"bundle"}',
    ADD COLUMN controls TEXT NOT NULL DEFAULT '{}';
UPDATE jobs
   SET kind = jsonb_build_object('type', 'group_chat', 'plan', variables::jsonb -> 'group_chat')::text,
       variables = (variables::jsonb - 'group_chat')::text
 WHERE jsonb_typeof(variables::jsonb -> 'group_chat') = 'object'
   AND jsonb_typeof(variables::jsonb #> '{group_chat,agents}') = 'array';
UPDATE jobs
   SET kind = jsonb_build_object('type', 'stage', 'stage', variables::jsonb -> 'only_stage')::text,
       variables = (variables::jsonb - 'only_stage')::text
 WHERE jsonb_typeof(variables::jsonb -> 'only_stage') = 'string'
   AND kind = '{"type":"bundle"}';
UPDATE jobs
   SET controls = jsonb_set(controls::jsonb, '{tools}', variables::jsonb -> 'tools')::text,
       variables = (variables::jsonb - 'tools')::text
 WHERE jsonb_typeof(variables::jsonb -> 'tools') IN ('array', 'string');
UPDATE jobs
   SET controls = jsonb_set(controls::jsonb, '{max_agents}', variables::jsonb -> 'max_agents')::text,
       variables = (variables::jsonb - 'max_agents')::text
 WHERE jsonb_typeof(variables::jsonb -> 'max_agents') = 'number'
   AND (variables::jsonb ->> 'max_agents') ~ '^[0-9]{1,10}$'
   AND (variables::jsonb ->> 'max_agents')::bigint <= 4294967295;
UPDATE jobs
   SET controls = jsonb_set(controls::jsonb, '{verbose}', variables::jsonb -> 'verbose')::text,
       variables = (variables::jsonb - 'verbose')::text
 WHERE jsonb_typeof(variables::jsonb -> 'verbose') = 'boolean'
   AND jsonb_typeof(variables::jsonb -> 'user_id') = 'string'
   AND conversation_id IS NOT NULL;
