-- shardwire catalog, migration 5: who holds a table UPDATING. The proxy incarnation running the
-- ALTER TABLE or CREATE INDEX is recorded (as its lease in proxy_lease names it), so that when
-- it dies mid-statement another proxy's recovery can return the table to ACTIVE once that lease
-- has lapsed.
ALTER TABLE shardwire_catalog.table_entry
    ADD COLUMN updating_cluster text,
    ADD COLUMN updating_proxy text,
    ADD COLUMN updating_epoch bigint,
    ADD CHECK (updating_proxy IS NULL OR state = 'updating');
