-- sluice schema v9 (PostgreSQL): an endpoint's own TLS setting (CA bundle, client certificate and key with
-- the one before its last rotation) and its OAuth2 client credentials, each a JSON object or
-- NULL (nothing set). The key and the client secret are write-only: the API never returns them.
ALTER TABLE endpoints ADD COLUMN tls TEXT;
ALTER TABLE endpoints ADD COLUMN oauth2 TEXT;
