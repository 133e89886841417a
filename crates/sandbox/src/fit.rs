//! Whether the engine can carry out a checked [`RunSpec`]: the CPUs it asks for, its egress
//! network and its runtime, asked of the engine before anything is created, so a front end
//! can refuse the request as the caller's fault (`serve`: a 400 naming the field).

use crate::engine::{ContainerEngine, EngineError};
use crate::network::{self, EGRESS_NETWORK, NetworkError};
use crate::spec::RunSpec;

/// What the engine lacks for a run. Display is the message for the caller.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unfit {
    /// The run asks for more CPUs than the engine has.
    #[error("cpus {asked} is more than the engine has ({available})")]
    Cpus {
        /// The CPUs the run asks for.
        asked: f64,
        /// The CPUs the engine has.
        available: u64,
    },
    /// The egress network the run names is not on the engine.
    #[error("egress network {name:?} does not exist on the engine")]
    EgressNetwork {
        /// The network the run names.
        name: String,
    },
    /// The run asks for an OCI runtime the engine does not offer.
    #[error("the engine has no runtime {name:?} (it has: {})", available.join(", "))]
    Runtime {
        /// The runtime the run asks for.
        name: String,
        /// The runtimes the engine offers.
        available: Vec<String>,
    },
    /// The engine did not answer: not the request's fault.
    #[error("cannot ask the engine whether it can run this")]
    Engine(#[source] EngineError),
}

impl Unfit {
    /// The setting the engine cannot carry out; `None` when the engine did not answer.
    pub fn field(&self) -> Option<crate::Field> {
        match self {
            Unfit::Cpus { .. } => Some(crate::Field::Cpus),
            Unfit::EgressNetwork { .. } => Some(crate::Field::EgressNetwork),
            Unfit::Runtime { .. } => Some(crate::Field::Runtime),
            Unfit::Engine(_) => None,
        }
    }
}

impl From<NetworkError> for Unfit {
    fn from(error: NetworkError) -> Unfit {
        match error {
            NetworkError::EgressMissing { name } => Unfit::EgressNetwork { name },
            NetworkError::Engine(error) => Unfit::Engine(error),
            other => Unfit::Engine(EngineError::Api {
                step: "inspect the egress network".into(),
                source: crate::engine::DockerError::Protocol {
                    message: crate::outcome::with_causes(&other),
                },
            }),
        }
    }
}

/// Checks `spec` against what `engine` has, asking the engine only about what the spec
/// names: no question for a run within one CPU on the default runtime (every engine has
/// that; a warm run is not made to wait on `docker info`). The tool's own egress network
/// is not checked: a run creates it on first use.
pub async fn check_fit(engine: &dyn ContainerEngine, spec: &RunSpec) -> Result<(), Unfit> {
    let asked = spec.limits().cpus;
    if asked > 1.0 || spec.runtime().is_some() {
        let info = engine.info().await.map_err(|source| {
            Unfit::Engine(EngineError::api("ask the engine what it has")(source))
        })?;
        if let Some(available) = info.cpus
            && asked > available as f64
        {
            return Err(Unfit::Cpus { asked, available });
        }
        if let Some(name) = spec.runtime()
            && !info.runtimes.contains_key(name)
        {
            return Err(Unfit::Runtime {
                name: name.to_owned(),
                available: info.runtimes.into_keys().collect(),
            });
        }
    }
    if let Some(name) = spec.egress_network().filter(|name| *name != EGRESS_NETWORK) {
        network::egress_network(engine, Some(name)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::testing::FakeEngine;

    fn spec(build: impl FnOnce(crate::RunSpecBuilder) -> crate::RunSpecBuilder) -> RunSpec {
        build(RunSpec::builder(["true"])).build().unwrap()
    }

    #[tokio::test]
    async fn what_the_engine_has_fits_and_what_it_lacks_is_named() {
        let fake = FakeEngine::local();
        fake.add_network("mine", HashMap::new());
        let fits = spec(|b| b.cpus(2.0).runtime("runc").egress_network("mine"));
        check_fit(&fake, &fits).await.unwrap();
        check_fit(&fake, &spec(|b| b.egress_network(EGRESS_NETWORK)))
            .await
            .unwrap();

        let unfit = check_fit(&fake, &spec(|b| b.cpus(64.0))).await.unwrap_err();
        assert!(
            matches!(unfit, Unfit::Cpus { available: 2, .. }),
            "{unfit:?}"
        );
        assert_eq!(unfit.to_string(), "cpus 64 is more than the engine has (2)");
        let unfit = check_fit(&fake, &spec(|b| b.runtime("kata")))
            .await
            .unwrap_err();
        assert_eq!(
            unfit.to_string(),
            "the engine has no runtime \"kata\" (it has: runc)"
        );
        let asked = fake.calls().len();
        check_fit(&fake, &spec(|b| b)).await.unwrap();
        assert_eq!(
            fake.calls().len(),
            asked,
            "a default run is checked without asking the engine"
        );
        let unfit = check_fit(&fake, &spec(|b| b.egress_network("nowhere")))
            .await
            .unwrap_err();
        assert!(
            matches!(&unfit, Unfit::EgressNetwork { name } if name == "nowhere"),
            "{unfit:?}"
        );
    }
}
