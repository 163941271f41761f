-- `memwarden migrate` (the compose file's migrate service) creates memwarden's schema and
-- tables; it needs pgvector available.
CREATE EXTENSION IF NOT EXISTS vector;
