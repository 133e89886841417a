//! TODO(run helper): the run lifecycle on Docker.
