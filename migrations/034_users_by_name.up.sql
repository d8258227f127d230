-- The account list pages by name, then id (keyset): each page reads the
-- index from the previous page's last row, whatever the number of accounts.
CREATE INDEX users_by_name ON users (full_name, id);
