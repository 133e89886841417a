//! The run flags a front end was given ([`FlagValues`]), and their effect on a run in the
//! order of [`RUN_FLAGS`].

use std::path::PathBuf;

use super::table::{RUN_FLAGS, RunFlag};
use super::value::FlagValue;
use egress_sandbox::{RunSpecBuilder, SpecError};

/// The run flags given, each with its values in order: what a front end parsed.
#[derive(Clone, Debug, Default)]
pub struct FlagValues {
    given: Vec<(&'static str, Vec<FlagValue>)>,
}

impl FlagValues {
    /// Adds one value of `flag`.
    pub fn push(&mut self, flag: &RunFlag, value: FlagValue) {
        match self.given.iter_mut().find(|(long, _)| *long == flag.long) {
            Some((_, values)) => values.push(value),
            None => self.given.push((flag.long, vec![value])),
        }
    }

    /// Every value of `flag`, in order.
    pub fn all(&self, flag: &RunFlag) -> &[FlagValue] {
        self.given
            .iter()
            .find(|(long, _)| *long == flag.long)
            .map_or(&[], |(_, values)| values.as_slice())
    }

    /// The last value of `flag` (a flag given once).
    pub fn get(&self, flag: &RunFlag) -> Option<&FlagValue> {
        self.all(flag).last()
    }

    /// The text of `flag`'s value.
    pub fn text(&self, flag: &RunFlag) -> Option<String> {
        self.get(flag).map(FlagValue::text)
    }

    /// The path of `flag`'s value.
    pub fn path(&self, flag: &RunFlag) -> Option<PathBuf> {
        self.get(flag).map(FlagValue::path)
    }

    /// Drops every value of `flag` (what `mcp` keeps for itself).
    pub fn remove(&mut self, flag: &RunFlag) {
        self.given.retain(|(long, _)| *long != flag.long);
    }

    /// Every flag's effect on `builder`, in [`RUN_FLAGS`]' order: the first flag refused
    /// is the error.
    pub fn apply(&self, mut builder: RunSpecBuilder) -> Result<RunSpecBuilder, SpecError> {
        for flag in RUN_FLAGS {
            let Some(apply) = flag.apply else { continue };
            for value in self.all(flag) {
                builder = apply(builder, value)?;
            }
        }
        Ok(builder)
    }
}
