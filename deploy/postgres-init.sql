-- memwarden creates its own schema and tables at start-up; it needs pgvector available.
CREATE EXTENSION IF NOT EXISTS vector;
