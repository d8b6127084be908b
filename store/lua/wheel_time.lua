-- wheel_time.lua: read the clock every wheel-stage script uses.
--
-- KEYS[1]  {p}:due  (not read: it routes the call to the node that runs the scripts, the
--                    primary of the wheel stage's slot in a Redis Cluster)
--
-- Returns Redis TIME: {seconds, microseconds}.
return redis.call('TIME')
