//! Whether the engine can carry out a checked [`RunSpec`]: the CPUs it asks for, its egress
//! network and its runtime, asked of the engine before anything is created, so a front end
//! can refuse the request as the caller's fault (`serve`: a 400 naming the field).
//! [`check_runtime`] is the one check of a runtime against the engine: a cold run, a
//! daemon's start and [`check_fit`] all make it.

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

/// A runtime a run names that the engine does not offer. Display is the message for the
/// caller, the same wherever the runtime is checked ([`check_runtime`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the engine has no runtime {name:?} (it has: {})", available.join(", "))]
pub struct UnknownRuntime {
    /// The runtime asked for, as given.
    pub name: String,
    /// The runtimes the engine offers, sorted.
    pub available: Vec<String>,
}

impl From<UnknownRuntime> for Unfit {
    fn from(UnknownRuntime { name, available }: UnknownRuntime) -> Unfit {
        Unfit::Runtime { name, available }
    }
}

/// What the engine said it has, asked once by [`check_runtime`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineOffer {
    /// CPUs the engine's host has, when it says.
    pub cpus: Option<u64>,
    /// Whether the runtime asked for is one of the engine's (`Ok` when none was named).
    pub runtime: Result<(), UnknownRuntime>,
}

/// The one check of a run's runtime against the engine, made by a cold run before anything
/// is created, by a daemon at its start and by [`check_fit`]: asks the engine what it has
/// (`docker info`, once) and says whether `runtime` (`None`: the engine's default, which
/// every engine has) is among its runtimes, with the engine's CPUs for a caller that checks
/// them too. An engine that does not answer is an error; a runtime it lacks is not, so
/// that each caller says it in its own terms.
pub async fn check_runtime(
    engine: &dyn ContainerEngine,
    runtime: Option<&str>,
) -> Result<EngineOffer, EngineError> {
    ask_engine(engine, runtime, "ask the engine for its runtimes").await
}

/// [`check_runtime`], its engine error naming `step`.
async fn ask_engine(
    engine: &dyn ContainerEngine,
    runtime: Option<&str>,
    step: &str,
) -> Result<EngineOffer, EngineError> {
    let info = engine.info().await.map_err(EngineError::api(step))?;
    let runtime = match runtime {
        Some(name) if !info.runtimes.contains_key(name) => Err(UnknownRuntime {
            name: name.to_owned(),
            available: info.runtimes.into_keys().collect(),
        }),
        _ => Ok(()),
    };
    Ok(EngineOffer {
        cpus: info.cpus,
        runtime,
    })
}

/// Checks `spec` against what `engine` has, asking the engine only about what the spec
/// names: no question for a run within one CPU on the default runtime (every engine has
/// that; a warm run is not made to wait on `docker info`). The tool's own egress network
/// is not checked: a run creates it on first use.
pub async fn check_fit(engine: &dyn ContainerEngine, spec: &RunSpec) -> Result<(), Unfit> {
    let asked = spec.limits().cpus;
    if asked > 1.0 || spec.runtime().is_some() {
        let offer = ask_engine(engine, spec.runtime(), "ask the engine what it has")
            .await
            .map_err(Unfit::Engine)?;
        if let Some(available) = offer.cpus
            && asked > available as f64
        {
            return Err(Unfit::Cpus { asked, available });
        }
        offer.runtime?;
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
    use crate::testing::{Call, FakeEngine, Method, injected_error};

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

    /// One question whatever is checked; a runtime the engine lacks is named with the
    /// engine's, and the engine's CPUs come back for the caller that checks them.
    #[tokio::test]
    async fn the_runtime_is_checked_with_one_question() {
        let fake = FakeEngine::local();
        for (runtime, expected) in [(None, Ok(())), (Some("runc"), Ok(()))] {
            let before = fake.calls().len();
            let offer = check_runtime(&fake, runtime).await.unwrap();
            assert_eq!(offer.runtime, expected);
            assert_eq!(offer.cpus, Some(2));
            assert_eq!(fake.calls()[before..], [Call::new(Method::Info, "")]);
        }
        let offer = check_runtime(&fake, Some("kata")).await.unwrap();
        let unknown = offer.runtime.unwrap_err();
        assert_eq!(
            unknown,
            UnknownRuntime {
                name: "kata".into(),
                available: vec!["runc".into()],
            }
        );
        assert_eq!(
            unknown.to_string(),
            "the engine has no runtime \"kata\" (it has: runc)"
        );
        assert_eq!(
            Unfit::from(unknown.clone()).to_string(),
            unknown.to_string(),
            "check_fit says it as the daemon and a cold run do"
        );
    }

    /// An engine that does not answer is an error naming the question and the answer;
    /// `check_fit` names its own question, which covers the CPUs too.
    #[tokio::test]
    async fn an_engine_that_does_not_answer_is_an_error_naming_the_question() {
        let fake = FakeEngine::local();
        let failure = || injected_error(&Call::new(Method::Info, ""));
        fake.fail_nth(Method::Info, 1, failure());
        let error = check_runtime(&fake, None).await.unwrap_err();
        assert_eq!(
            crate::outcome::with_causes(&error),
            format!("Docker: ask the engine for its runtimes: {}", failure())
        );
        fake.fail_nth(Method::Info, 1, failure());
        let unfit = check_fit(&fake, &spec(|b| b.runtime("runc")))
            .await
            .unwrap_err();
        assert!(matches!(unfit, Unfit::Engine(_)), "{unfit:?}");
        assert_eq!(
            crate::outcome::with_causes(&unfit),
            format!(
                "cannot ask the engine whether it can run this: Docker: ask the engine what it \
                 has: {}",
                failure()
            )
        );
    }
}
