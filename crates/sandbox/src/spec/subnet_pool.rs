//! The address range per-run /29 networks are taken from.

use ipnet::Ipv4Net;

use super::{Field, SpecError, invalid};

/// The subnet pool runs take their /29 from, unless `EGRESS_SANDBOX_SUBNET_POOL` says otherwise.
pub const DEFAULT_SUBNET_POOL: &str = "10.213.0.0/16";
/// The environment variable that sets the subnet pool, an IPv4 CIDR of /29 or larger.
pub const SUBNET_POOL_ENV: &str = "EGRESS_SANDBOX_SUBNET_POOL";

pub(super) fn check_pool(pool: Ipv4Net, what: &str) -> Result<Ipv4Net, SpecError> {
    if pool.prefix_len() > 29 {
        return Err(invalid(
            Field::SubnetPool,
            format!("{what} {pool}"),
            "must be /29 or larger",
        ));
    }
    Ok(pool.trunc())
}

pub(super) fn subnet_pool_from_env() -> Result<Ipv4Net, SpecError> {
    match std::env::var(SUBNET_POOL_ENV) {
        Ok(value) if !value.trim().is_empty() => {
            let pool: Ipv4Net = value.trim().parse().map_err(|_| {
                invalid(
                    Field::SubnetPool,
                    format!("{SUBNET_POOL_ENV}={value}"),
                    "expected an IPv4 CIDR such as 10.213.0.0/16",
                )
            })?;
            check_pool(pool, SUBNET_POOL_ENV)
        }
        _ => Ok(DEFAULT_SUBNET_POOL.parse().expect("valid default pool")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_must_hold_a_slash_29() {
        assert!(check_pool("10.0.0.0/30".parse().unwrap(), "pool").is_err());
        assert_eq!(
            check_pool("10.213.1.9/16".parse().unwrap(), "pool").unwrap(),
            "10.213.0.0/16".parse::<Ipv4Net>().unwrap()
        );
    }
}
