-- Custom assistants (queue/assistants.rs): each key's named settings over a
-- bundle, in numbered versions (`settings` is one version's JSON); `latest`
-- is the version runs use.
CREATE TABLE assistants (
    owner TEXT NOT NULL,
    id TEXT NOT NULL,
    latest INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (owner, id)
);
CREATE INDEX assistants_created ON assistants (owner, created_at);
CREATE TABLE assistant_versions (
    owner TEXT NOT NULL,
    id TEXT NOT NULL,
    version INTEGER NOT NULL,
    settings TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (owner, id, version)
);
