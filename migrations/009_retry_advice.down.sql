DELETE FROM reactor_checkpoints WHERE name = 'retry_advice';
DROP TABLE retry_advice;
