//! TODO(run helper): the run report and summary line.
