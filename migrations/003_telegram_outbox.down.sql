DELETE FROM reactor_checkpoints WHERE name = 'telegram';
DROP TABLE IF EXISTS telegram_outbox;
DROP SEQUENCE IF EXISTS telegram_outbox_batch_seq;
