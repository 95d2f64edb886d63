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
-- refused it.
ALTER TABLE jobs ADD COLUMN kind TEXT NOT NULL DEFAULT '{"type":"bundle"}';
ALTER TABLE jobs ADD COLUMN controls TEXT NOT NULL DEFAULT '{}';
UPDATE jobs
   SET kind = json_object('type', 'group_chat', 'plan', json(variables -> '$.group_chat')),
       variables = json_remove(variables, '$.group_chat')
 WHERE json_type(variables, '$.group_chat') = 'object'
   AND json_type(variables, '$.group_chat.agents') = 'array';
UPDATE jobs
   SET kind = json_object('type', 'stage', 'stage', variables ->> '$.only_stage'),
       variables = json_remove(variables, '$.only_stage')
 WHERE json_type(variables, '$.only_stage') = 'text'
   AND kind = '{"type":"bundle"}';
UPDATE jobs
   SET controls = json_set(controls, '$.tools', json(variables -> '$.tools')),
       variables = json_remove(variables, '$.tools')
 WHERE json_type(variables, '$.tools') IN ('array', 'text');
UPDATE jobs
   SET controls = json_set(controls, '$.max_agents', variables ->> '$.max_agents'),
       variables = json_remove(variables, '$.max_agents')
 WHERE json_type(variables, '$.max_agents') = 'integer'
   AND (variables ->> '$.max_agents') BETWEEN 0 AND 4294967295;
UPDATE jobs
   SET controls = json_set(controls, '$.verbose', json(variables -> '$.verbose')),
       variables = json_remove(variables, '$.verbose')
 WHERE json_type(variables, '$.verbose') IN ('true', 'false')
   AND json_type(variables, '$.user_id') = 'text'
   AND conversation_id IS NOT NULL;
