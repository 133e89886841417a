//! The DNS responder's per-client limits, in tables of bounded size, so neither a query
//! flood nor many client addresses make memory grow.
//!
//! A client is an address, except that every loopback address (all of 127.0.0.0/8, `::1`,
//! and IPv4 loopback carried in IPv6) is one client: a sandbox owns its whole loopback and
//! can send from any of those addresses, so keying them apart would give it a bucket per
//! address. A run's sandbox reaches the proxy only through its loopback (local runs) or from
//! its one address on the run's network, so the limit is the run's limit.
//!
//! What a query costs is what it adds to the audit log, so queries are charged by what
//! they are, once judged:
//! - A refusal (a name the policy refuses, a made-up name, a malformed message) draws on
//!   the refusal bucket: `rate` a second, bursts of a quarter second's worth. A flood of
//!   made-up names gets that many records a second; the rest are REFUSED and only counted
//!   (the `end` record's `dropped`).
//! - The first lookup of an allowed name draws on the answer bucket: `rate` a second,
//!   bursts of two seconds' worth, so a program opening a few hundred connections at once,
//!   each with its own lookup, is answered.
//! - A repeated lookup of an allowed name within the answer's TTL, of any type (glibc asks
//!   A and AAAA, and asks again for every connection), costs nothing and gets no record:
//!   its answer is the one already recorded for that client and name, which a caching
//!   resolver would have kept. Neither audit spam nor a flood can be built from repeats:
//!   each is one small answer back to the sandbox that asked, and no record.
//!
//! It lives in the shared state (one set of tables per proxy, UDP and TCP alike), so it
//! sits beside the other shared pieces rather than inside the DNS door.

/// TTL of the DNS door's answers: short, so a policy change or a new run is seen quickly.
/// Within it, a client's repeated lookup of an allowed name is not recorded again.
pub(crate) const ANSWER_TTL: u32 = 30;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The default of `--dns-rate`: queries per second per client (a run's sandbox is one). A program resolves
/// a handful of names per connection it makes; 200 a second is far above any honest use.
pub const DEFAULT_DNS_RATE: u32 = 200;

/// Clients tracked at once per bucket table; past it, idle or least recently seen clients
/// are forgotten.
const MAX_CLIENTS: usize = 1024;

/// Allowed (client, name) pairs remembered at once as answered. Past it, expired ones are
/// forgotten, and all of them when most are still fresh: a forgotten pair is only charged
/// and recorded again.
const MAX_ANSWERED: usize = 4096;

/// Seconds of refusals a client may save up.
const REFUSAL_BURST_SECONDS: f64 = 0.25;

/// Seconds of first lookups of allowed names a client may save up.
const ANSWER_BURST_SECONDS: f64 = 2.0;

/// The DNS responder's limits for every client: one bucket for refusals, one for first
/// lookups of allowed names, and the allowed names each client was answered lately.
pub(crate) struct DnsRate {
    refusals: RateLimiter,
    answers: RateLimiter,
    answered: Mutex<HashMap<(Client, String), Instant>>,
    /// How long an answered name stays answered: the answers' TTL.
    repeat_window: Duration,
}

/// What an answer to an allowed name costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnswerCost {
    /// The first lookup of this name by this client lately: answered and recorded.
    First,
    /// The client was answered this name within the TTL: answered, not recorded again.
    Repeat,
    /// Over the answer rate: REFUSED and counted.
    OverRate,
}

impl DnsRate {
    /// `rate` queries a second per client (at least 1) for each of refusals and first
    /// lookups; a name answered is a repeat for `repeat_window`.
    pub(crate) fn new(rate: u32, repeat_window: Duration) -> DnsRate {
        DnsRate {
            refusals: RateLimiter::new(rate, REFUSAL_BURST_SECONDS),
            answers: RateLimiter::new(rate, ANSWER_BURST_SECONDS),
            answered: Mutex::default(),
            repeat_window,
        }
    }

    /// Whether a query from `address` that is not an answer to an allowed name (a refusal,
    /// a malformed message, the sandbox's own name) may be answered now (and takes a token
    /// if so).
    pub(crate) fn allow_refusal(&self, address: IpAddr) -> bool {
        self.refusals.allow_at(address, Instant::now())
    }

    /// What answering `name` (allowed) to `address` costs, taking a token for a first lookup.
    pub(crate) fn answer(&self, address: IpAddr, name: &str) -> AnswerCost {
        self.answer_at(address, name, Instant::now())
    }

    fn answer_at(&self, address: IpAddr, name: &str, now: Instant) -> AnswerCost {
        let key = (Client::of(address), name.to_owned());
        let Ok(mut answered) = self.answered.lock() else {
            return AnswerCost::First;
        };
        if answered
            .get(&key)
            .is_some_and(|at| now.saturating_duration_since(*at) < self.repeat_window)
        {
            return AnswerCost::Repeat;
        }
        if !self.answers.allow_at(address, now) {
            return AnswerCost::OverRate;
        }
        if answered.len() >= MAX_ANSWERED {
            self.forget_answered(&mut answered, now);
        }
        answered.insert(key, now);
        AnswerCost::First
    }

    /// Makes room: expired pairs go, and when most are still fresh (only a wildcard rule
    /// fed made-up names for a while does that), all of them.
    fn forget_answered(&self, answered: &mut HashMap<(Client, String), Instant>, now: Instant) {
        answered.retain(|_, at| now.saturating_duration_since(*at) < self.repeat_window);
        if answered.len() >= MAX_ANSWERED / 2 {
            answered.clear();
        }
    }

    /// Pairs remembered now (for tests: the table stays bounded).
    #[cfg(test)]
    fn answered_len(&self) -> usize {
        self.answered.lock().map(|a| a.len()).unwrap_or(0)
    }
}

/// Token buckets per client: `rate` tokens a second, at most `burst` saved up.
struct RateLimiter {
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
    /// `rate` queries a second per client (at least 1), with a burst of `burst_seconds`
    /// worth (at least 1 query).
    fn new(rate: u32, burst_seconds: f64) -> RateLimiter {
        let rate = f64::from(rate.max(1));
        RateLimiter {
            rate,
            burst: (rate * burst_seconds).ceil().max(1.0),
            clients: Mutex::default(),
        }
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
    fn tracked(&self) -> usize {
        self.clients.lock().map(|c| c.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 3));

    #[test]
    fn a_burst_passes_then_the_rate_holds() {
        let limiter = RateLimiter::new(8, REFUSAL_BURST_SECONDS);
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
        let limiter = RateLimiter::new(8, REFUSAL_BURST_SECONDS);
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
        let limiter = RateLimiter::new(1, REFUSAL_BURST_SECONDS);
        let now = Instant::now();
        for n in 0..(MAX_CLIENTS as u32 * 3) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            assert!(limiter.allow_at(ip, now));
        }
        assert!(limiter.tracked() <= MAX_CLIENTS);
    }

    const WINDOW: Duration = Duration::from_secs(30);

    #[test]
    fn repeats_of_an_answered_name_are_free_until_the_window_ends() {
        let rate = DnsRate::new(1, WINDOW);
        let start = Instant::now();
        assert_eq!(
            rate.answer_at(CLIENT, "site.test", start),
            AnswerCost::First
        );
        for _ in 0..1000 {
            assert_eq!(
                rate.answer_at(CLIENT, "site.test", start),
                AnswerCost::Repeat
            );
        }
        assert_eq!(
            rate.answer_at(CLIENT, "other.test", start),
            AnswerCost::First,
            "a burst of two seconds' worth"
        );
        assert_eq!(
            rate.answer_at(CLIENT, "third.test", start),
            AnswerCost::OverRate
        );
        let other = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 4));
        assert_eq!(
            rate.answer_at(other, "site.test", start),
            AnswerCost::First,
            "a repeat is per client"
        );
        let later = start + WINDOW;
        assert_eq!(
            rate.answer_at(CLIENT, "site.test", later),
            AnswerCost::First
        );
    }

    #[test]
    fn answers_and_refusals_have_their_own_buckets() {
        let rate = DnsRate::new(4, WINDOW);
        let start = Instant::now();
        let refused = (0..100)
            .filter(|_| rate.refusals.allow_at(CLIENT, start))
            .count();
        assert_eq!(refused, 1, "a refusal burst of a quarter second's worth");
        let firsts = (0..100)
            .filter(|n| rate.answer_at(CLIENT, &format!("n{n}.test"), start) == AnswerCost::First)
            .count();
        assert_eq!(firsts, 8, "an answer burst of two seconds' worth");
    }

    #[test]
    fn the_answered_table_stays_bounded() {
        let rate = DnsRate::new(u32::MAX, WINDOW);
        let now = Instant::now();
        for n in 0..(MAX_ANSWERED * 3) {
            assert_eq!(
                rate.answer_at(CLIENT, &format!("n{n}.test"), now),
                AnswerCost::First
            );
        }
        assert!(rate.answered_len() <= MAX_ANSWERED);
    }
}
