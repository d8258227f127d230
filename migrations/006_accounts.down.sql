ALTER TABLE users
    DROP COLUMN active,
    DROP COLUMN token_epoch,
    DROP COLUMN locked_until,
    DROP COLUMN lockouts,
    DROP COLUMN offline_since;
