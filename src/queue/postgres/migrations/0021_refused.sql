-- A statement that must not go ahead, in a transaction the daemon sends
-- with its COMMIT in one round trip (postgres/settle.rs: a finish and the
-- slot's next lease), raises this: the whole transaction then rolls back
-- on the server, where the daemon cannot look at the answer before it
-- commits. The daemon writes the end again on its own to learn why.
CREATE FUNCTION sa_refused(what text) RETURNS int LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  RAISE EXCEPTION 'refused: %', what USING ERRCODE = 'SA001';
END $$;
