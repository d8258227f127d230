DELETE FROM reactor_checkpoints WHERE name = 'schedule_failures';
