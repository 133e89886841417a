//! Removes images this tool made and no longer needs, so development rebuilds and concurrent
//! first runs do not pile up images. Best effort: never fails the caller.
//!
//! Our code refers to images by tag only, so an image that lost its tag (two processes with
//! different cache dirs imported the same tag at once; the last one wins) can never be
//! started by us again and goes after a short grace (import creates, then tags: the grace
//! keeps us off an image between those two steps). A proxy image of another binary goes when
//! it has been neither created nor handed out for [`SWEEP_GRACE`]: another checkout or
//! version of the tool may be about to start it (a run can first spend minutes building the
//! base image). Images a container still uses are kept: removal without force is refused.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::engine::{ContainerEngine, ImageSummary};

use super::handed_out::last_handed_out;
use super::{IMAGE_LABEL, PROXY_REPOSITORY};

const SWEEP_GRACE: Duration = Duration::from_secs(30 * 60);
const UNTAGGED_GRACE: Duration = Duration::from_secs(2 * 60);

/// Removes what [`stale_names`] allows; `current` is the proxy tag the caller is about to
/// use. Returns how many images were removed.
pub(super) async fn remove_leftover_images(
    engine: &dyn ContainerEngine,
    cache_dir: &Path,
    current: Option<&str>,
) -> usize {
    let images = match engine.list_images(IMAGE_LABEL).await {
        Ok(images) => images,
        Err(error) => {
            tracing::debug!(%error, "could not list our images to sweep");
            return 0;
        }
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for image in images {
        let names = stale_names(&image, current, now, |tag| last_handed_out(cache_dir, tag));
        for name in names {
            match engine.remove_image(&name, false).await {
                Ok(_) => {
                    removed += 1;
                    tracing::debug!(image = %name, "removed a leftover image");
                }
                Err(error) => tracing::debug!(image = %name, %error, "kept a leftover image"),
            }
        }
    }
    removed
}

/// The names (tags, or the id of an untagged image) under which `image`, one of ours, may be
/// removed; empty if it must stay.
fn stale_names(
    image: &ImageSummary,
    current: Option<&str>,
    now: SystemTime,
    handed_out: impl Fn(&str) -> Option<SystemTime>,
) -> Vec<String> {
    let older_than =
        |time: SystemTime, grace: Duration| now.duration_since(time).is_ok_and(|age| age >= grace);
    let created = SystemTime::UNIX_EPOCH + Duration::from_secs(image.created.max(0) as u64);
    let tags: Vec<&String> = image
        .repo_tags
        .iter()
        .filter(|t| *t != "<none>:<none>")
        .collect();
    if tags.is_empty() {
        return if older_than(created, UNTAGGED_GRACE) {
            vec![image.id.clone()]
        } else {
            Vec::new()
        };
    }
    let is_proxy_tag = |tag: &str| {
        tag.strip_prefix(PROXY_REPOSITORY)
            .is_some_and(|t| t.starts_with(':'))
    };
    let keep = !older_than(created, SWEEP_GRACE)
        || tags.iter().any(|t| {
            Some(t.as_str()) == current
                || !is_proxy_tag(t)
                || handed_out(t).is_some_and(|when| !older_than(when, SWEEP_GRACE))
        });
    if keep {
        Vec::new()
    } else {
        tags.into_iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(tags: &[&str], age: Duration) -> ImageSummary {
        let created = SystemTime::now() - age;
        ImageSummary {
            id: "sha256:0123".into(),
            repo_tags: tags.iter().map(|t| t.to_string()).collect(),
            created: created
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64,
        }
    }

    const CURRENT: Option<&str> = Some("egress-sandbox-proxy:1111111111111111");
    const OLD: &str = "egress-sandbox-proxy:2222222222222222";
    const HOUR: Duration = Duration::from_secs(3600);
    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn an_old_proxy_image_of_another_binary_is_stale() {
        let now = SystemTime::now();
        let never = |_: &str| None;
        assert_eq!(
            stale_names(&image(&[OLD], 2 * HOUR), CURRENT, now, never),
            [OLD]
        );
        assert_eq!(
            stale_names(&image(&[OLD], 2 * HOUR), None, now, never),
            [OLD]
        );
        let long_ago = |_: &str| Some(now - 2 * HOUR);
        assert_eq!(
            stale_names(&image(&[OLD], 2 * HOUR), CURRENT, now, long_ago),
            [OLD]
        );
    }

    #[test]
    fn recent_current_used_and_foreign_images_are_kept() {
        let now = SystemTime::now();
        let never = |_: &str| None;
        let kept = |image: ImageSummary, handed_out: &dyn Fn(&str) -> Option<SystemTime>| {
            stale_names(&image, CURRENT, now, handed_out).is_empty()
        };
        assert!(kept(image(&[OLD], MINUTE), &never));
        assert!(kept(image(&[CURRENT.unwrap()], 2 * HOUR), &never));
        assert!(kept(image(&[OLD, "someone/else:latest"], 2 * HOUR), &never));
        assert!(kept(
            image(&["egress-sandbox-proxy-fork:1"], 2 * HOUR),
            &never
        ));
        assert!(kept(
            image(&["egress-sandbox-base:bookworm-1"], 2 * HOUR),
            &never
        ));
        assert!(kept(image(&[OLD], 2 * HOUR), &|_| Some(now - MINUTE)));
    }

    #[test]
    fn an_untagged_image_goes_by_id_after_a_short_grace() {
        let now = SystemTime::now();
        let leftover = image(&["<none>:<none>"], 5 * MINUTE);
        assert_eq!(
            stale_names(&leftover, CURRENT, now, |_| None),
            ["sha256:0123"]
        );
        assert_eq!(
            stale_names(&image(&[], 5 * MINUTE), None, now, |_| None),
            ["sha256:0123"]
        );
        let just_imported = image(&[], Duration::from_secs(5));
        assert!(stale_names(&just_imported, CURRENT, now, |_| None).is_empty());
    }
}
