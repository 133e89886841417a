//! When each proxy image was last handed out to a run: one empty file per tag under the
//! cache dir, its mtime the time. [`super::proxy`] stamps a tag each time it hands it out;
//! [`super::sweep`] keeps a proxy image of another binary while its stamp is recent (another
//! checkout or version of the tool may be about to start it).

use std::path::Path;
use std::time::SystemTime;

/// The stamps' directory under the cache dir.
const STAMP_DIR: &str = "proxy-images";

/// Remembers when this tag was last handed out, for the sweep of other
/// processes. Best effort.
pub(super) fn stamp(cache_dir: &Path, tag: &str) {
    let dir = cache_dir.join(STAMP_DIR);
    let file = dir.join(tag.replace(':', "_"));
    let result = std::fs::create_dir_all(&dir)
        .and_then(|()| {
            std::fs::File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&file)
        })
        .and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(error) = result {
        tracing::debug!(%error, file = %file.display(), "could not stamp the proxy image");
    }
}

pub(super) fn last_handed_out(cache_dir: &Path, tag: &str) -> Option<SystemTime> {
    let file = cache_dir.join(STAMP_DIR).join(tag.replace(':', "_"));
    std::fs::metadata(file).and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stamps_record_when_a_tag_was_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        assert!(last_handed_out(dir.path(), "egress-sandbox-proxy:00").is_none());
        stamp(dir.path(), "egress-sandbox-proxy:00");
        let when = last_handed_out(dir.path(), "egress-sandbox-proxy:00").unwrap();
        assert!(SystemTime::now().duration_since(when).unwrap() < Duration::from_secs(60));
    }
}
