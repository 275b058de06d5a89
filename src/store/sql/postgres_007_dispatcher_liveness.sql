-- sluice schema v7 (PostgreSQL): each heartbeat names the backend of its process's LISTEN
-- connection, which lives exactly as long as the process. A process killed outright closes it,
-- PostgreSQL's pg_stat_activity drops it at once, and readers stop counting that dispatcher
-- without waiting for its heartbeat to go stale. NULL (an older process, or a listener not yet
-- connected) falls back to the heartbeat's age alone.
ALTER TABLE dispatchers ADD COLUMN backend_pid INTEGER;
