//! The Lua scripts behind fleet lanes, and the Redis key names they touch.
//!
//! Every script reads the time with `redis.call('TIME')`: the expiry of a holder is judged by one
//! clock, Redis's own, so dispatchers whose clocks drift apart still agree on who holds a slot.
//! No script takes a timestamp from the client. Redis ≥ 5 replicates scripts by their effects, so
//! calling `TIME` before a write is allowed (Redis 7 has no other mode).

/// Acquire one lane slot, atomically.
///
/// `KEYS[1]`: the lane's sorted set, `KEYS[2]`: the live dispatchers' sorted set. `ARGV[1]`:
/// allowance (slots), `ARGV[2]`: slot ttl (ms), `ARGV[3]`: the holder member
/// (`{process_id}:{counter}`), `ARGV[4]`: a live entry's ttl (ms, a duration, not a time).
/// Returns 1 when the slot was taken, 0 when the lane is full.
///
/// Expired holders are pruned first, so a crashed holder's slot frees itself after its ttl even
/// under steady traffic (the leak INCR/DECR + TTL cannot recover from). So are the holders of a
/// dispatcher that is no longer live (its entry in `KEYS[2]` expired: it was killed), once the
/// slot is older than one live-entry ttl: every live dispatcher has renewed its entry since it
/// took the slot, even after a Redis that came back empty, so a holder taken by a live process
/// is never mistaken for an orphan. A killed dispatcher's slots thus come back after about
/// three heartbeats instead of a whole slot ttl (which must outlast the longest attempt).
/// The key's own expiry is only ever extended, never shortened, so a dispatcher configured with
/// a shorter ttl cannot make the key (and a longer-lived holder in it) vanish early.
pub(super) const ACQUIRE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local taken_before = now - tonumber(ARGV[4])
for _, holder in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (taken_before + ttl))) do
  local process = string.match(holder, '^(.*):[^:]*$')
  local live_until = process and redis.call('ZSCORE', KEYS[2], process)
  if not live_until or tonumber(live_until) < now then
    redis.call('ZREM', KEYS[1], holder)
  end
end
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  return 1
end
return 0
";

/// Renew this dispatcher's entry among the live ones and count them, atomically.
///
/// `KEYS[1]`: the dispatchers' sorted set. `ARGV[1]`: process id, `ARGV[2]`: entry ttl (ms).
/// Returns `{live, rank}`: the number of live dispatchers, this one included, and how many of
/// them have a process id that sorts before this one's (its place in the fleet, which the
/// rate limits' outage shares need: [`crate::model::RateLimit::share`]).
pub(super) const HEARTBEAT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local live = redis.call('ZRANGE', KEYS[1], 0, -1)
local rank = 0
for _, id in ipairs(live) do
  if id < ARGV[1] then
    rank = rank + 1
  end
end
return {#live, rank}
";

/// One step of an endpoint's fleet-wide rate limit (GCRA), atomically.
///
/// `KEYS[1]`: the endpoint's bucket, its theoretical arrival time (TAT) in microseconds on
/// Redis's clock. `ARGV[1]`: the emission interval (µs, ≥ 1), `ARGV[2]`: the burst (≥ 1).
/// Returns `{taken, wait, ahead}`: 1 when a turn was taken (0 when held), how long until the
/// next turn is free (µs, 0 when taken) and how far the TAT now runs ahead of now (µs).
///
/// The same step as [`crate::admission::rate::Bucket::try_take`]. The key lives only while its
/// TAT is ahead: once it has passed, a missing key is the same full bucket.
pub(super) const RATE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * (tonumber(ARGV[2]) - 1)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
local free_at = tat - tolerance
if free_at > now then
  return {0, free_at - now, tat - now}
end
local next_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', next_tat), 'PX', math.floor((next_tat - now) / 1000) + 1)
return {1, 0, next_tat - now}
";

/// The sorted set of holders of one endpoint's lane: `{prefix}:lane:{endpoint_id}`.
pub(super) fn lane_key(prefix: &str, endpoint_id: &str) -> String {
    format!("{prefix}:lane:{endpoint_id}")
}

/// The TAT of one endpoint's fleet-wide rate limit: `{prefix}:rate:{endpoint_id}`.
pub(super) fn rate_key(prefix: &str, endpoint_id: &str) -> String {
    format!("{prefix}:rate:{endpoint_id}")
}

/// The sorted set of live dispatchers: `{prefix}:dispatchers`.
pub(super) fn dispatchers_key(prefix: &str) -> String {
    format!("{prefix}:dispatchers")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_follow_the_documented_layout() {
        assert_eq!(lane_key("sluice", "ep_1"), "sluice:lane:ep_1");
        assert_eq!(dispatchers_key("sluice"), "sluice:dispatchers");
        assert_eq!(rate_key("sluice", "ep_1"), "sluice:rate:ep_1");
    }

    #[test]
    fn scripts_read_the_clock_from_redis_only() {
        for script in [ACQUIRE, HEARTBEAT, RATE] {
            assert!(script.contains("local now = tonumber(t[1])"));
            assert!(script.contains("redis.call('TIME')"));
            // Every argument is a count, a duration or a name: none is read as the time.
            assert!(
                !script.contains("now = tonumber(ARGV"),
                "no client timestamp"
            );
        }
        assert!(
            !ACQUIRE.contains("ARGV[5]"),
            "acquire's arguments are the four documented"
        );
    }
}
