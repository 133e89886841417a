//! The DNS responder's per-client rate limit: a token bucket per client, in a table of
//! bounded size, so neither a query flood nor many client addresses make memory grow.
//!
//! A client is an address, except that every loopback address (all of 127.0.0.0/8, `::1`,
//! and IPv4 loopback carried in IPv6) is one client: a sandbox owns its whole loopback and
//! can send from any of those addresses, so keying them apart would give it a bucket per
//! address. A run's sandbox reaches the proxy only through its loopback (local runs) or from
//! its one address on the run's network, so the limit is the run's limit.
//!
//! A sandbox that sends queries faster than the rate gets REFUSED for the excess; those
//! queries are counted (the `end` record's `dropped`) but get no record each, so a flood of
//! made-up names can neither fill the audit log nor cost the proxy a lookup.
//!
//! It lives in the shared state (one table per proxy, UDP and TCP alike), so it sits beside
//! the other shared pieces rather than inside the DNS door.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::Instant;

/// The default of `--dns-rate`: queries per second per client (a run's sandbox is one). A program resolves
/// a handful of names per connection it makes; 200 a second is far above any honest use.
pub const DEFAULT_DNS_RATE: u32 = 200;

/// Clients tracked at once; past it, idle or least recently seen clients are forgotten.
const MAX_CLIENTS: usize = 1024;

/// Token buckets per client: `rate` tokens a second, at most `burst` saved up.
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    clients: Mutex<HashMap<Client, Bucket>>,
}

/// Whom a query counts against: the address it came from, with every loopback address
/// folded into one (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Client(IpAddr);

impl Client {
    fn of(address: IpAddr) -> Client {
        let address = address.to_canonical();
        if address.is_loopback() {
            Client(IpAddr::V4(Ipv4Addr::LOCALHOST))
        } else {
            Client(address)
        }
    }
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

impl RateLimiter {
    /// `rate` queries a second per client (at least 1), with a burst of a quarter second's
    /// worth (at least 1 query): a program's start-up lookups pass, a flood does not.
    pub(crate) fn new(rate: u32) -> RateLimiter {
        let rate = f64::from(rate.max(1));
        RateLimiter {
            rate,
            burst: (rate / 4.0).ceil().max(1.0),
            clients: Mutex::default(),
        }
    }

    /// Whether a query from `address` may be answered now (and takes a token if so).
    pub(crate) fn allow(&self, address: IpAddr) -> bool {
        self.allow_at(address, Instant::now())
    }

    fn allow_at(&self, address: IpAddr, now: Instant) -> bool {
        let client = Client::of(address);
        let Ok(mut clients) = self.clients.lock() else {
            return true;
        };
        if clients.len() >= MAX_CLIENTS && !clients.contains_key(&client) {
            self.forget_some(&mut clients, now);
        }
        let bucket = clients.entry(client).or_insert(Bucket {
            tokens: self.burst,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Makes room: clients whose bucket has refilled are forgotten (a new bucket is the
    /// same), else the one seen least recently.
    fn forget_some(&self, clients: &mut HashMap<Client, Bucket>, now: Instant) {
        let refill = self.burst / self.rate;
        clients
            .retain(|_, bucket| now.saturating_duration_since(bucket.last).as_secs_f64() < refill);
        if clients.len() >= MAX_CLIENTS
            && let Some(oldest) = clients
                .iter()
                .min_by_key(|(_, bucket)| bucket.last)
                .map(|(client, _)| *client)
        {
            clients.remove(&oldest);
        }
    }

    /// Clients tracked now (for tests: the table stays bounded).
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.clients.lock().map(|c| c.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 3));

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let limiter = RateLimiter::new(8);
        let start = Instant::now();
        let passed = (0..10).filter(|_| limiter.allow_at(CLIENT, start)).count();
        assert_eq!(passed, 2, "a burst of a quarter second's worth");
        let later = start + Duration::from_millis(500);
        let passed = (0..10).filter(|_| limiter.allow_at(CLIENT, later)).count();
        assert_eq!(
            passed, 2,
            "half a second refills 4, capped at the burst of 2"
        );
        let other = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 4));
        assert!(
            limiter.allow_at(other, later),
            "each client has its own bucket"
        );
    }

    #[test]
    fn every_loopback_address_shares_one_bucket() {
        let limiter = RateLimiter::new(8);
        let now = Instant::now();
        let loopback = [
            "127.0.0.1",
            "127.0.0.2",
            "127.45.6.7",
            "127.255.255.254",
            "::1",
            "::ffff:127.9.9.9",
        ];
        let passed = loopback
            .iter()
            .filter(|address| limiter.allow_at(address.parse().unwrap(), now))
            .count();
        assert_eq!(passed, 2, "one burst for the whole loopback");
        assert_eq!(limiter.tracked(), 1);
        assert!(
            limiter.allow_at(CLIENT, now),
            "another address is another client"
        );
    }

    #[test]
    fn the_client_table_stays_bounded() {
        let limiter = RateLimiter::new(1);
        let now = Instant::now();
        for n in 0..(MAX_CLIENTS as u32 * 3) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            assert!(limiter.allow_at(ip, now));
        }
        assert!(limiter.tracked() <= MAX_CLIENTS);
    }
}
