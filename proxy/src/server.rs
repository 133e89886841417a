//! TODO(proxy helper): see issue 3.
