-- LangGraph's store (queue/items.rs): each key's JSON objects under a
-- namespace (its labels joined by '.') and a key. `ttl_ms` is how long an
-- item is kept unread; `expires_at` (ms) when it goes unless read again.
CREATE TABLE store_items (
    owner TEXT NOT NULL,
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    index_fields TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    ttl_ms BIGINT,
    expires_at BIGINT,
    PRIMARY KEY (owner, namespace, key)
);
CREATE INDEX store_items_updated ON store_items (owner, updated_at);
