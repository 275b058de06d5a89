//! The Lua scripts behind fleet lanes, and the Redis key names they touch.
//!
//! Every script reads the time with `redis.call('TIME')`: the expiry of a holder is judged by one
//! clock, Redis's own, so dispatchers whose clocks drift apart still agree on who holds a slot.
//! No script takes a timestamp from the client. Redis ≥ 5 replicates scripts by their effects, so
//! calling `TIME` before a write is allowed (Redis 7 has no other mode).

/// Acquire one lane slot, atomically.
///
/// `KEYS[1]`: the lane's sorted set. `ARGV[1]`: allowance (slots), `ARGV[2]`: slot ttl (ms),
/// `ARGV[3]`: the holder member. Returns 1 when the slot was taken, 0 when the lane is full.
///
/// Expired holders are pruned first, so a crashed holder's slot frees itself after its ttl even
/// under steady traffic (the leak INCR/DECR + TTL cannot recover from). The key's own expiry is
/// only ever extended, never shortened, so a dispatcher configured with a shorter ttl cannot make
/// the key (and a longer-lived holder in it) vanish early.
pub(super) const ACQUIRE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
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
/// Returns the number of live dispatchers, this one included.
pub(super) const HEARTBEAT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return redis.call('ZCARD', KEYS[1])
";

/// The sorted set of holders of one endpoint's lane: `{prefix}:lane:{endpoint_id}`.
pub(super) fn lane_key(prefix: &str, endpoint_id: &str) -> String {
    format!("{prefix}:lane:{endpoint_id}")
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
    }

    #[test]
    fn scripts_read_the_clock_from_redis_only() {
        for script in [ACQUIRE, HEARTBEAT] {
            assert!(script.contains("redis.call('TIME')"));
            assert!(!script.contains("ARGV[4]"), "no client timestamp argument");
        }
    }
}
