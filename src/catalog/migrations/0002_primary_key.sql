-- shardwire catalog, migration 2: what the DDL rewrite needs to know about existing tables.
-- The primary key's columns and types: a foreign key without a column list refers to them, and an
-- Oracle NoSQL child table inherits them. Tables recorded before this migration have none.
ALTER TABLE shardwire_catalog.table_entry
    ADD COLUMN pk_columns text[] NOT NULL DEFAULT '{}',
    ADD COLUMN pk_types text[] NOT NULL DEFAULT '{}',
    ADD CHECK (cardinality(pk_columns) = cardinality(pk_types));
