//! `url NAME`: the preview's URL alone on stdout, for scripts (`open $(vesperctl url pr-42)`);
//! exit 1 with the reason on stderr when it has none yet.

use crate::client::Target;
use crate::error::{Error, Result};
use crate::preview;

pub async fn run(t: &Target, name: &str) -> Result<()> {
    let pe = preview::get(t, name).await?;
    match pe.status.as_ref().and_then(|s| s.url.as_deref()).filter(|u| !u.is_empty()) {
        Some(url) => {
            outln!("{url}");
            Ok(())
        }
        None => Err(Error::Failed(format!(
            "preview {name:?} has no URL yet ({}); the operator sets it once it has set the preview up, \
             and only when it runs with a preview domain (--preview-domain)",
            preview::summary(&pe)
        ))),
    }
}
